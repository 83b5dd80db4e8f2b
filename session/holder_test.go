package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// startHolder runs a holder in this process for the test and returns its
// directory; dialHolder is an agent's connection to it.
func startHolder(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "holder")
	srv, err := holder.Listen(holder.Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return dir
}

func dialHolder(t *testing.T, dir string) *holder.Client {
	t.Helper()
	c, err := holder.Dial(ctxT(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHolderReattach: a shell in a holder keeps running across its agent's
// restart. The first agent runs commands and starts a long one, then goes
// (Detach); the next one (Reattach, a new connection) sees the same blocks with the
// same numbers, offsets and exit codes, waits for the long command's real exit
// code, and its next block continues the numbering.
func TestHolderReattach(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		dir := startHolder(t)
		s := startShell(t, shell, func(c *Config) { c.Holder = dialHolder(t, dir) })
		if r := run(t, s, "echo one; (exit 3)"); exitCode(r) != 3 || !strings.Contains(r.Text, "one") {
			t.Fatalf("first block: %d %q", exitCode(r), r.Text)
		}
		res, err := s.Run(ctxT(t), "sleep 1; echo done; (exit 7)", RunOptions{Timeout: 50 * time.Millisecond})
		if err != nil || res.Block.State != BlockRunning {
			t.Fatalf("long command: %+v, %v", res.Block, err)
		}
		long := res.Block.N
		before := s.Blocks()
		_, end := s.Offsets()
		pid := s.Pid()
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}

		s2, err := Reattach(Config{ID: "t1", Holder: dialHolder(t, dir)}, Recorded{}) // no recorded blocks: the commands come from the echo
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if s2.Pid() != pid {
			t.Fatalf("reattached pid %d, want %d", s2.Pid(), pid)
		}
		if _, end2 := s2.Offsets(); end2 < end {
			t.Fatalf("reattached output ends at %d, before %d", end2, end)
		}
		after := s2.Blocks()
		if len(after) < len(before) {
			t.Fatalf("blocks after reattach: %d, before %d", len(after), len(before))
		}
		for i, b := range before[:len(before)-1] { // the last one may have finished since
			a := after[i]
			if a.N != b.N || a.Command != b.Command || a.Start != b.Start || a.End != b.End || exitOf(a) != exitOf(b) {
				t.Fatalf("block %d differs after reattach:\n%+v\n%+v", b.N, a, b)
			}
		}
		r, err := s2.WaitBlock(ctxT(t), long, RunOptions{Timeout: 20 * time.Second})
		if err != nil || r.Block.State != BlockDone || exitCode(r) != 7 || strings.Count(r.Text, "done") != 1 {
			t.Fatalf("long block after reattach: %+v %q, %v", r.Block, r.Text, err)
		}
		r = run(t, s2, "echo two")
		if r.Block.N != long+1 || strings.TrimSpace(r.Text) != "two" {
			t.Fatalf("next block %d %q, want %d", r.Block.N, r.Text, long+1)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		if list, err := dialHolder(t, dir).List(ctxT(t)); err != nil || len(list) != 0 {
			t.Fatalf("holder still lists %+v after Close (%v)", list, err)
		}
	})
}

func exitOf(b Block) int {
	if b.ExitCode == nil {
		return -1
	}
	return *b.ExitCode
}

// TestHolderExitWhileDetached: the shell exits while no agent is attached; the
// next agent gets its exit code and the whole output.
func TestHolderExitWhileDetached(t *testing.T) {
	dir := startHolder(t)
	s := startShell(t, "bash", func(c *Config) { c.Holder = dialHolder(t, dir) })
	run(t, s, "echo ready")
	if err := s.Input([]byte("sleep 0.3; echo bye; exit 5\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	c := dialHolder(t, dir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := c.List(ctxT(t))
		if err != nil || len(list) != 1 {
			t.Fatalf("list: %+v, %v", list, err)
		}
		if list[0].Exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the shell did not exit in the holder")
		}
		time.Sleep(20 * time.Millisecond) // polling the holder's list: the condition, with a deadline
	}
	s2, err := Reattach(Config{ID: "t1", Holder: c}, Recorded{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	in, err := s2.Wait(ctxT(t), UntilExited, 0)
	if err != nil || in.ExitCode == nil || *in.ExitCode != 5 {
		t.Fatalf("exit after reattach: %+v, %v", in.ExitCode, err)
	}
	out, err := s2.Read(0, 1<<20)
	if err != nil || strings.Count(string(out), "bye") != 2 { // the echo of the line, and its output
		t.Fatalf("output after reattach: %q, %v", out, err)
	}
}

func TestReattachUnknown(t *testing.T) {
	dir := startHolder(t)
	if _, err := Reattach(Config{ID: "nope", Holder: dialHolder(t, dir)}, Recorded{}); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("reattach of an unknown session: %v", err)
	}
}

// TestHolderGuardSurvives: a line typed while no agent runs waits for the guard of
// the next agent (the holder keeps the agent's end of the shell's guard channel);
// a denied one never runs, an allowed one runs after the reattach.
func TestHolderGuardSurvives(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		dir := startHolder(t)
		c := dialHolder(t, dir)
		s := startGuarded(t, shell, newFakeGuard(), func(cfg *Config) { cfg.Holder = c })
		runCode(t, s, "true", 0)
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
		files := t.TempDir()
		// Someone types at the terminal while no agent runs (a copy of the master
		// from the holder: what an attached person's keystrokes become).
		st, err := c.Attach(ctxT(t), "t1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Master.Write([]byte("touch " + files + "/denied # DENY\r")); err != nil {
			t.Fatal(err)
		}
		st.Close()
		st.Master.Close()
		if st.Kept != nil {
			st.Kept.Close()
		}
		g := newFakeGuard()
		s2, err := Reattach(Config{ID: "t1", Holder: c, Guard: g.decide}, Recorded{})
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		testutil.Eventually(t, 10*time.Second, func() bool {
			return strings.Contains(strings.Join(g.asked(), "\n"), files+"/denied")
		}, "the new agent's guard is asked about the line typed meanwhile")
		testutil.Eventually(t, 10*time.Second, func() bool {
			for _, b := range s2.Blocks() {
				if b.State == BlockDone && strings.HasPrefix(b.Note, api.NoteDenied) {
					return true
				}
			}
			return false
		}, "the line typed meanwhile ends denied")
		if b := typeLine(t, s2, "touch "+files+"/ok; (exit 4)"); b.ExitCode == nil || *b.ExitCode != 4 {
			t.Fatalf("allowed line after the reattach: exit %v note %q", b.ExitCode, b.Note)
		}
		noFile(t, filepath.Join(files, "denied"))
		if _, err := os.Stat(filepath.Join(files, "ok")); err != nil {
			t.Fatalf("the allowed line did not run: %v", err)
		}
	})
}

// TestHolderProgram: a program run without shell integration starts in a holder
// (it has no nonce: starting it once dereferenced the missing integration and left
// the program running in the holder, out of every list), and closing the session
// ends it there.
func TestHolderProgram(t *testing.T) {
	dir := startHolder(t)
	c := dialHolder(t, dir)
	s, err := Start(Config{ID: "p1", Argv: []string{"sh", "-c", "echo started; exec sleep 100"}, Dir: t.TempDir(),
		BaseEnv: []string{"PATH=" + os.Getenv("PATH")}, RuntimeDir: t.TempDir(), Holder: c})
	if err != nil {
		t.Fatalf("start a program in the holder: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := s.Read(0, 1<<10)
		if strings.Contains(string(out), "started") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output from the program: %q", out)
		}
		time.Sleep(10 * time.Millisecond) // polling the session's output: the condition, with a deadline
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		list, err := c.List(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 || list[0].Exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program still runs in the holder after Close: %+v", list)
		}
		time.Sleep(20 * time.Millisecond) // polling the holder's list: the condition, with a deadline
	}
}

// TestHolderGuardQuestionAcrossRestart: the agent reads the shell's question about
// a line and goes before it answers (here Detach while its guard still decides; a
// kill -9 is the same to the shell). The shell used to wait for that answer for a
// day; the next agent has it ask again, and the line runs once it is allowed.
func TestHolderGuardQuestionAcrossRestart(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		dir := startHolder(t)
		c := dialHolder(t, dir)
		g := newFakeGuard()
		s := startGuarded(t, shell, g, func(cfg *Config) { cfg.Holder = c })
		runCode(t, s, "true", 0)
		files := t.TempDir()
		if err := s.Input([]byte("touch " + files + "/ran # HOLD\r")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.held: // the agent has the question and has not answered
		case <-time.After(20 * time.Second):
			t.Fatal("the guard was never asked about the line")
		}
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
		noFile(t, filepath.Join(files, "ran"))
		var asked atomic.Int32
		allow := func(ctx context.Context, line string) GuardVerdict {
			if strings.Contains(line, files) {
				asked.Add(1)
			}
			return GuardVerdict{Allow: true}
		}
		s2, err := Reattach(Config{ID: "t1", Holder: c, Guard: allow}, Recorded{})
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		testutil.Eventually(t, 20*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(files, "ran"))
			return err == nil
		}, "the line the last agent never answered runs once the new agent allows it")
		if _, err := s2.Wait(ctxT(t), UntilIdle, 0); err != nil {
			t.Fatal(err)
		}
		if n := asked.Load(); n != 1 {
			t.Fatalf("the new agent was asked about the line %d times, want 1", n)
		}
		if b := typeLine(t, s2, "(exit 4)"); b.ExitCode == nil || *b.ExitCode != 4 {
			t.Fatalf("the next line: exit %v note %q", b.ExitCode, b.Note)
		}
	})
}

// TestHolderDetachMidMark: an agent stops (Detach) while the last output it has
// read ends inside a shell mark (the mark's rest is still to come). The bytes held
// back are not output: they get no offset, so the next agent (which replays them
// with the rest, a mark) gives every byte the offset the previous one gave it, and
// the nonce they carry never reaches the output (streams, recordings, reads). A
// Detach once released them as output: the nonce showed in the output, and every
// offset after it differed by their length between the two agents (the next
// agent's publisher and recorder, which go on from the previous one's offsets,
// skipped that many bytes).
func TestHolderDetachMidMark(t *testing.T) {
	dir := startHolder(t)
	s := startShell(t, "bash", func(c *Config) { c.Holder = dialHolder(t, dir) })
	nonce := s.integ.nonce
	run(t, s, "true")
	// The shell prints a mark's first part, and its rest (a cwd mark) a while later.
	res, err := s.Run(ctxT(t), `echo before; sleep 0.3; printf '\033]7;fm=%s;file://h' "$__fm_nonce"; sleep 2; printf '/x\007'; echo after`,
		RunOptions{Timeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	partial := int64(len("\x1b]7;fm=" + nonce + ";file://h"))
	var held int64 // raw bytes ingested and not output (marks removed, and what is held back)
	testutil.Eventually(t, 10*time.Second, func() bool {
		out, _ := s.Read(0, 1<<20)
		_, end := s.Offsets()
		if held == 0 && strings.Contains(string(out), "before\r\n") {
			held = s.hold.raw.Load() - end
		}
		return held > 0 && s.hold.raw.Load()-end == held+partial
	}, "the agent has read the mark's first part")
	_, end := s.Offsets()
	before, _ := s.Read(0, int(end))
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	_, end = s.Offsets()
	out, _ := s.Read(0, int(end))
	if !bytes.Equal(out, before) || bytes.Contains(out, []byte(nonce)) {
		t.Fatalf("Detach gave the mark's first part offsets: output %q before, %q after (nonce %s)", before, out, nonce)
	}
	s2, err := Reattach(Config{ID: "t1", Holder: dialHolder(t, dir)}, Recorded{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	r, err := s2.WaitBlock(ctxT(t), res.Block.N, RunOptions{Timeout: 20 * time.Second})
	if err != nil || r.Block.State != BlockDone {
		t.Fatalf("the block after the reattach: %+v, %v", r.Block, err)
	}
	all, _ := s2.Read(0, 1<<20)
	if !bytes.HasPrefix(all, out) || bytes.Contains(all, []byte(nonce)) || strings.Count(string(all), "\rbefore\r\nafter\r\n") != 1 {
		t.Fatalf("the next agent's output is not the previous one's and the rest:\nbefore: %q\nafter:  %q", out, all)
	}
}

// TestHolderStreamTakenAgain: a process with the holder's uid takes a session's
// stream again each time the agent takes it back. The agent takes it back
// maxRetakes times, then closes the session in the holder: the session ends
// exited with its shell gone, never exited with a live shell out of every
// agent's reach.
func TestHolderStreamTakenAgain(t *testing.T) {
	dir := startHolder(t)
	s := startShell(t, "bash", func(c *Config) { c.Holder = dialHolder(t, dir); c.ID = "t1" })
	if r := run(t, s, "echo one"); !strings.Contains(r.Text, "one") {
		t.Fatalf("first block: %q", r.Text)
	}
	pid := s.Pid()
	rogue := dialHolder(t, dir)
	takes, exited := 0, false
	for !exited {
		list, err := rogue.List(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 {
			break // the agent closed it
		}
		st, err := rogue.Attach(ctxT(t), "t1", 0, list[0].Epoch)
		if errors.Is(err, holder.ErrStale) {
			continue // the agent took it back between the two
		}
		if errors.Is(err, holder.ErrNoSession) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		takes++
		for { // until the agent takes it back, or closes the session
			ch, err := st.Next()
			if err != nil {
				break
			}
			if ch.Exited {
				exited = true
				break
			}
		}
		closeStream(st)
	}
	if takes != maxRetakes+1 {
		t.Errorf("the rogue took the stream %d times, want %d", takes, maxRetakes+1)
	}
	if _, err := s.Wait(ctxT(t), UntilExited, 0); err != nil {
		t.Fatalf("wait: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }, "the shell to be gone")
}
