package session

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// fakeGuard denies every line containing "DENY" (rule "no-deny"), holds lines
// containing "HOLD" until release is closed, and records what it was asked.
type fakeGuard struct {
	mu      sync.Mutex
	lines   []string
	release chan struct{}
	held    chan string // gets each held line
}

func newFakeGuard() *fakeGuard {
	return &fakeGuard{release: make(chan struct{}), held: make(chan string, 8)}
}

func (g *fakeGuard) decide(ctx context.Context, line string) GuardVerdict {
	g.mu.Lock()
	g.lines = append(g.lines, line)
	g.mu.Unlock()
	if strings.Contains(line, "HOLD") {
		g.held <- line
		select {
		case <-g.release:
		case <-ctx.Done():
			return GuardVerdict{Rule: "held", Message: "abandoned"}
		}
	}
	if strings.Contains(line, "DENY") {
		return GuardVerdict{Rule: "no-deny", Message: "lines with that word do not run"}
	}
	return GuardVerdict{Allow: true}
}

func (g *fakeGuard) asked() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.lines...)
}

func startGuarded(t *testing.T, shell string, g *fakeGuard, mod ...func(*Config)) *Session {
	t.Helper()
	return startShell(t, shell, append([]func(*Config){func(c *Config) { c.Guard = g.decide }}, mod...)...)
}

// typeLine types line at the prompt (as a person or `input` would) and waits for the
// block it makes to finish.
func typeLine(t *testing.T, s *Session, line string) Block {
	t.Helper()
	ctx := ctxT(t)
	if _, err := s.Wait(ctx, UntilIdle, 0); err != nil {
		t.Fatal(err)
	}
	n := len(s.Blocks())
	if err := s.Input([]byte(line + "\r")); err != nil {
		t.Fatal(err)
	}
	var b Block
	testutil.Eventually(t, 15*time.Second, func() bool {
		bs := s.Blocks()
		if len(bs) <= n || bs[n].State != BlockDone {
			return false
		}
		b = bs[n]
		return true
	}, "the block of the typed line %q to finish", line)
	return b
}

// typeLineOrInterrupt types line; when its block has not finished after a while (the
// shell waits for an answer someone stole), Ctrl-C abandons it.
func typeLineOrInterrupt(t *testing.T, s *Session, line string) Block {
	t.Helper()
	ctx := ctxT(t)
	if _, err := s.Wait(ctx, UntilIdle, 0); err != nil {
		s.mu.Lock()
		st := fmt.Sprintf("state %s guarding %d await %v cur %v pending %v atPrompt %v", s.state, s.guarding, s.guardAwait, s.cur != nil, s.pending != nil, s.atPrompt)
		s.mu.Unlock()
		t.Fatalf("not idle before %q: %v; %s; screen:\n%s", line, err, st, screenText(t, s))
	}
	n := len(s.Blocks())
	if err := s.Input([]byte(line + "\r")); err != nil {
		t.Fatal(err)
	}
	done := func() bool { bs := s.Blocks(); return len(bs) > n && bs[n].State == BlockDone }
	for deadline := time.Now().Add(3 * time.Second); !done() && time.Now().Before(deadline); {
		waitChange(ctx, s.Noted(), 50*time.Millisecond)
	}
	if !done() {
		t.Logf("%q: no answer (stolen?): Ctrl-C", line)
		if err := s.SendKeys("C-c"); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, done, "the block of %q", line)
	return s.Blocks()[n]
}

func screenText(t *testing.T, s *Session) string {
	t.Helper()
	sc, err := s.Screen()
	if err != nil {
		t.Fatal(err)
	}
	return sc.Text
}

func noFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Fatalf("%s exists: a denied line ran", path)
	}
}

// TestGuardTypedLines: a denied line typed at the prompt does not run (nothing of it:
// not its first command, not the ones after), the terminal says why, its block has no
// exit code and says it was denied; allowed lines, typed or run, run with their codes.
func TestGuardTypedLines(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		g := newFakeGuard()
		s := startGuarded(t, shell, g)
		dir := t.TempDir()
		for i, line := range []string{
			"touch %s/a; echo DENY",
			"echo DENY; touch %s/a",
			"(touch %s/a); : DENY",
			"touch %s/a | cat # DENY",
			"{ touch %s/a; } # DENY",
			"for i in 1; do touch %s/a; done # DENY",
			"x=$(touch %s/a) # DENY",
			"echo DENY; (touch %s/a)",
			"echo DENY; (touch %s/a; exit 7)",
			"echo DENY; x=$(touch %s/a)",
			"echo DENY | (touch %s/a)",
		} {
			line = fmt.Sprintf(line, dir)
			b := typeLine(t, s, line)
			noFile(t, filepath.Join(dir, "a"))
			if b.ExitCode != nil || b.Note != api.NoteDenied+" no-deny" {
				t.Fatalf("line %d %q: block exit %v note %q; want no code and %q", i, line, b.ExitCode, b.Note, api.NoteDenied+" no-deny")
			}
			if r, _ := s.BlockText(b.N, TextOptions{}); !strings.Contains(r.Text, "fleetmux: denied by rule no-deny: lines with that word do not run") && shell == "bash" {
				t.Fatalf("line %q: the block does not say why: %q", line, r.Text)
			}
			if sc := screenText(t, s); !strings.Contains(sc, "fleetmux: denied by rule no-deny: lines with that word do not run") {
				t.Fatalf("line %q: the screen does not say why:\n%s", line, sc)
			}
			// The next line runs, with its own exit code.
			if r := runCode(t, s, "echo after-$((6*7)); (exit 3)", 3); r.Text != "after-42" {
				t.Fatalf("after a denied line: %q", r.Text)
			}
		}
		// Allowed lines whose first command runs in a subshell.
		for _, line := range []string{"(exit 3)", "(touch " + dir + "/sub); (exit 3)", "x=$(exit 3)", "true | (exit 3)"} {
			if r := runCode(t, s, line, 3); r.Block.Note != "" {
				t.Fatalf("%q: %+v", line, r.Block)
			}
		}
		if _, err := os.Stat(dir + "/sub"); err != nil {
			t.Fatalf("an allowed line starting with a subshell did not run: %v", err)
		}
		// Allowed lines typed and run.
		if b := typeLine(t, s, "touch "+dir+"/ok; (exit 4)"); b.ExitCode == nil || *b.ExitCode != 4 {
			t.Fatalf("allowed typed line: exit %v note %q", b.ExitCode, b.Note)
		}
		if _, err := os.Stat(dir + "/ok"); err != nil {
			t.Fatalf("the allowed line did not run: %v", err)
		}
		// A run through Run is checked like a typed line.
		r, err := s.Run(ctxT(t), "touch "+dir+"/a # DENY", RunOptions{Timeout: 10 * time.Second})
		if err != nil || r.Block.State != BlockDone || r.Block.ExitCode != nil || r.Block.Note != api.NoteDenied+" no-deny" {
			t.Fatalf("Run of a denied line: %+v, %v", r.Block, err)
		}
		noFile(t, filepath.Join(dir, "a"))
		runCode(t, s, "true", 0)
		asked := strings.Join(g.asked(), "\n")
		if !strings.Contains(asked, "touch "+dir+"/ok; (exit 4)") {
			t.Fatalf("the guard was not asked about the typed line; it saw:\n%s", asked)
		}
		if strings.Contains(asked, "__fm") {
			t.Fatalf("the guard was asked about the integration's own commands:\n%s", asked)
		}
	})
}

// TestGuardHolds: while the guard has not decided, the line does not run and the
// session is not idle; once it allows, the line runs with its exit code.
func TestGuardHolds(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		g := newFakeGuard()
		s := startGuarded(t, shell, g)
		ctx := ctxT(t)
		dir := t.TempDir()
		if _, err := s.Wait(ctx, UntilIdle, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Input([]byte("touch " + dir + "/held; echo HOLD; (exit 5)\r")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.held:
		case <-ctx.Done():
			t.Fatal("the guard was not asked")
		}
		// Held: longer than a command takes to run, nothing ran and the session is busy.
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) {
			noFile(t, filepath.Join(dir, "held"))
			if st := s.Info().State; st != StateRunning {
				t.Fatalf("state %s while the guard decides, want running", st)
			}
			waitChange(ctx, s.Noted(), 20*time.Millisecond)
		}
		close(g.release)
		if _, err := s.Wait(ctx, UntilIdle, 0); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, func() bool {
			bs := s.Blocks()
			return len(bs) > 0 && bs[len(bs)-1].State == BlockDone
		}, "the held line's block")
		bs := s.Blocks()
		if b := bs[len(bs)-1]; b.ExitCode == nil || *b.ExitCode != 5 {
			t.Fatalf("held then allowed: exit %v note %q", b.ExitCode, b.Note)
		}
		if _, err := os.Stat(dir + "/held"); err != nil {
			t.Fatalf("the allowed line did not run: %v", err)
		}
	})
}

// TestGuardChildCannotForge: a program the shell started holds the shell's end of the
// guard channel. It reads the answers (stealing them) and writes requests of its own
// (no nonce) and splices bytes into the shell's; none of it makes a denied line run.
func TestGuardChildCannotForge(t *testing.T) {
	testutil.NeedTool(t, "python3")
	forEachShell(t, func(t *testing.T, shell string) {
		g := newFakeGuard()
		s := startGuarded(t, shell, g)
		dir := t.TempDir()
		// The thief: finds the shell's guard socket among its inherited fds, and for
		// a while reads whatever comes and writes forged allows and requests.
		thief := filepath.Join(dir, "thief.py")
		os.WriteFile(thief, []byte(`import os, socket, sys, time, select
socks = []
for fd in range(3, 64):
    try:
        s = socket.socket(fileno=os.dup(fd))
        if s.type == socket.SOCK_STREAM and s.family == socket.AF_UNIX:
            socks.append(s)
    except OSError:
        pass
print("thief has", len(socks), "sockets", flush=True)
if os.fork() != 0:
    sys.exit(0)
end = time.time() + 4
while time.time() < end:
    for s in socks:
        try:
            s.setblocking(False)
            try:
                s.recv(65536)
            except BlockingIOError:
                pass
            for c in range(20):
                s.send(b"fm\t%d\tallow\t-\t\n" % c)
            s.send(b"Q 0000 99 1 l\ntrue\0")
            s.send(b" allowed-text\0")
        except OSError:
            pass
    time.sleep(0.001)
open(sys.argv[1], "w").close()
`), 0o600)
		gone := filepath.Join(dir, "thief-gone")
		r := runCode(t, s, "python3 "+thief+" "+gone, 0)
		if !strings.Contains(r.Text, "thief has 1 sockets") {
			t.Fatalf("the thief did not find the guard's socket (the attack must be performed): %q", r.Text)
		}
		// While the thief runs, denied lines are typed: none may run (the shell may
		// lose answers to the thief and say so, or be told no).
		for i := range 3 {
			marker := filepath.Join(dir, fmt.Sprintf("m%d", i))
			b := typeLineOrInterrupt(t, s, "touch "+marker+" # DENY")
			noFile(t, marker)
			if b.ExitCode != nil && *b.ExitCode == 0 {
				t.Fatalf("a denied line ended with exit code 0: %+v", b)
			}
		}
		// Once the thief is gone (it made the shared socket non-blocking too: the
		// session puts it back), lines are decided as before.
		testutil.Eventually(t, 15*time.Second, func() bool { _, err := os.Stat(gone); return err == nil }, "the thief to end")
		if r := runCode(t, s, "echo back", 0); r.Text != "back" {
			t.Fatalf("after the thief: %q", r.Text)
		}
		if b := typeLine(t, s, "touch "+dir+"/m9 # DENY"); b.Note != api.NoteDenied+" no-deny" {
			t.Fatalf("a denied line after the thief: note %q", b.Note)
		}
		noFile(t, dir+"/m9")
		for _, l := range g.asked() {
			if strings.Contains(l, "allowed-text") || l == "true" {
				t.Fatalf("the guard was asked about a line the thief wrote: %q", l)
			}
		}
	})
}

// TestGuardKeepsUserHooks: a user's DEBUG trap (bash) and accept-line wrapper (zsh)
// still run in a guarded shell, also when set after startup.
func TestGuardKeepsUserHooks(t *testing.T) {
	rc := map[string]string{
		"bash": "trap 'echo \"dbg:$BASH_COMMAND\" >>\"$HOME/dbg\"' DEBUG\n",
		"zsh":  "__my_accept() { print -r -- \"acc:$BUFFER\" >>$HOME/acc; zle .accept-line }\nzle -N accept-line __my_accept\n",
	}
	forEachShell(t, func(t *testing.T, shell string) {
		home := t.TempDir()
		name := map[string]string{"bash": ".bashrc", "zsh": ".zshrc"}[shell]
		if err := os.WriteFile(filepath.Join(home, name), []byte(rc[shell]), 0o600); err != nil {
			t.Fatal(err)
		}
		g := newFakeGuard()
		s := startGuarded(t, shell, g, func(c *Config) {
			c.BaseEnv = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
			c.Dir = home
		})
		log := map[string]string{"bash": "dbg", "zsh": "acc"}[shell]
		typeLine(t, s, "echo first-line")
		b := typeLine(t, s, "touch "+home+"/x # DENY")
		noFile(t, home+"/x")
		if b.Note != api.NoteDenied+" no-deny" {
			t.Fatalf("denied: note %q", b.Note)
		}
		data, _ := os.ReadFile(filepath.Join(home, log))
		want := map[string]string{"bash": "dbg:echo first-line", "zsh": "acc:echo first-line"}[shell]
		if !strings.Contains(string(data), want) {
			t.Fatalf("the user's hook did not run: %q", data)
		}
		if strings.Contains(string(data), "/x # DENY") && shell == "bash" {
			t.Fatalf("the user's DEBUG trap ran for a denied command: %q", data)
		}
		// Set later, at the prompt: the guard still checks, the user's hook still runs.
		later := map[string]string{
			"bash": "trap 'echo \"later:$BASH_COMMAND\" >>\"$HOME/later\"' DEBUG",
			"zsh":  "__my2() { print -r -- \"later:$BUFFER\" >>$HOME/later; zle .accept-line }; zle -N accept-line __my2",
		}[shell]
		runCode(t, s, later, 0)
		typeLine(t, s, "echo second-line")
		b = typeLine(t, s, "touch "+home+"/y # DENY")
		noFile(t, home+"/y")
		if b.Note != api.NoteDenied+" no-deny" {
			t.Fatalf("denied after the user's new hook: note %q", b.Note)
		}
		data, _ = os.ReadFile(filepath.Join(home, "later"))
		if !strings.Contains(string(data), "later:echo second-line") {
			t.Fatalf("the user's later hook did not run: %q", data)
		}
		runCode(t, s, "echo ok", 0)
	})
}

// TestGuardTrapRemoved: a line that removes the DEBUG trap or extdebug gets them back
// at the next prompt, before the next line is read.
func TestGuardTrapRemoved(t *testing.T) {
	g := newFakeGuard()
	s := startGuarded(t, "bash", g)
	dir := t.TempDir()
	for _, undo := range []string{"trap - DEBUG", "shopt -u extdebug", "HISTCONTROL=ignoreboth; HISTIGNORE='*'", "shopt -u cmdhist"} {
		t.Logf("step %q", undo)
		runCode(t, s, undo, 0)
		b := typeLine(t, s, " touch "+dir+"/x # DENY")
		noFile(t, dir+"/x")
		if b.ExitCode != nil {
			t.Fatalf("after %q: a denied line has exit code %d", undo, *b.ExitCode)
		}
		if undo == "shopt -u cmdhist" {
			typeLine(t, s, "for i in 1\ndo touch "+dir+"/x # DENY\ndone")
			noFile(t, dir+"/x")
		}
	}
	runCode(t, s, "echo fine", 0)
	// History off cannot be undone from a hook: every line is denied by the shell.
	runCode(t, s, "set +o history", 0)
	for _, line := range []string{"touch " + dir + "/y", "set -o history; touch " + dir + "/y"} {
		b := typeLine(t, s, line)
		noFile(t, dir+"/y")
		if b.ExitCode != nil || !strings.Contains(screenText(t, s), "start a new session") {
			t.Fatalf("%q typed with history off: exit %v, screen:\n%s", line, b.ExitCode, screenText(t, s))
		}
	}
}

// TestGuardFunctraceOff: set +T (functrace off, which extdebug had turned on) would let
// a subshell run without the trap, so a line starting with one would not be checked;
// the next prompt turns it back on.
func TestGuardFunctraceOff(t *testing.T) {
	g := newFakeGuard()
	s := startGuarded(t, "bash", g)
	dir := t.TempDir()
	runCode(t, s, "set +T", 0)
	b := typeLine(t, s, "(touch "+dir+"/x) # DENY")
	noFile(t, dir+"/x")
	if b.ExitCode != nil {
		t.Fatalf("after set +T: a denied line has exit code %d", *b.ExitCode)
	}
}

// TestGuardGoneFailsClosed: when the session's end of the channel answers garbage or
// is gone, lines do not run and the shell says why.
func TestGuardGoneFailsClosed(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		dir := t.TempDir()
		garbage, proceed := make(chan struct{}, 1), make(chan struct{})
		s := startShell(t, shell, func(c *Config) {
			c.Guard = func(ctx context.Context, line string) GuardVerdict {
				if strings.Contains(line, "GARBAGE") {
					garbage <- struct{}{}
					<-proceed // the allow that follows comes too late: the shell gave up
				}
				return GuardVerdict{Allow: true}
			}
		})
		runCode(t, s, "true", 0)
		ctx := ctxT(t)
		if err := s.Input([]byte("touch " + dir + "/g # GARBAGE\r")); err != nil {
			t.Fatal(err)
		}
		<-garbage
		s.guard.conn.Write([]byte("this is not an answer\n"))
		testutil.Eventually(t, 10*time.Second, func() bool {
			return strings.Contains(screenText(t, s), "fleetmux: the guard's answer is garbled, so the line does not run")
		}, "the shell to say the answer was garbled")
		close(proceed)
		if _, err := s.Wait(ctx, UntilIdle, 0); err != nil {
			t.Fatal(err)
		}
		noFile(t, dir+"/g")
		if r := run(t, s, "echo still-checked"); exitCode(r) != 0 || r.Text != "still-checked" { // the late allow is skipped, this line's own is taken
			t.Fatalf("the line after: exit %d note %q text %q; screen:\n%s", exitCode(r), r.Block.Note, r.Text, screenText(t, s))
		}
		// Gone: the session's end closed.
		s.guard.conn.Close()
		if err := s.Input([]byte("touch " + dir + "/h\r")); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, func() bool {
			sc := screenText(t, s)
			return strings.Contains(sc, "fleetmux: the guard is gone, so the line does not run")
		}, "the shell to refuse the line")
		noFile(t, dir+"/h")
		if st := s.Info().State; st == StateExited {
			t.Fatal("the shell died")
		}
	})
}

func TestParseGuardRequest(t *testing.T) {
	const nonce = "0123abcd"
	for _, tc := range []struct {
		name, frame string
		ok          bool
		line        string
		key         uint64
	}{
		{"literal", "Q 0123abcd 7 991 l\necho hi", true, "echo hi", 7},
		{"history", "Q 0123abcd 8 12 h\n  501  rm -rf /tmp/x\n", true, "rm -rf /tmp/x", 8},
		{"history multi-line", "Q 0123abcd 8 12 h\n 3  for i in 1\ndo echo $i\ndone\n", true, "for i in 1\ndo echo $i\ndone", 8},
		{"history edited", "Q 0123abcd 8 12 h\n    9* ls\n", true, "ls", 8},
		{"unaccepted", "Q 0123abcd 0 12 r\ntouch x", true, "touch x", 0},
		{"wrong nonce", "Q 0123abce 7 991 l\necho hi", false, "", 0},
		{"no nonce", "Q  7 991 l\necho hi", false, "", 0},
		{"no newline", "Q 0123abcd 7 991 l", false, "", 0},
		{"bad key", "Q 0123abcd x 991 l\necho", false, "", 0},
		{"bad challenge", "Q 0123abcd 1 9a l\necho", false, "", 0},
		{"bad kind", "Q 0123abcd 1 9 z\necho", false, "", 0},
		{"history garbage", "Q 0123abcd 1 9 h\nnot history", false, "", 0},
		{"extra field", "Q 0123abcd 1 9 l x\necho", false, "", 0},
	} {
		req, ok := parseGuardRequest([]byte(tc.frame), nonce)
		if ok != tc.ok || ok && (req.line != tc.line || req.key != tc.key || req.unaccepted != (tc.name == "unaccepted")) {
			t.Errorf("%s: got %+v %v, want line %q key %d ok %v", tc.name, req, ok, tc.line, tc.key, tc.ok)
		}
	}
	if _, ok := parseGuardRequest([]byte("Q  1 2 l\nx"), ""); ok {
		t.Error("an empty nonce accepted a request")
	}
}

func FuzzParseGuardRequest(f *testing.F) {
	f.Add([]byte("Q n 7 991 l\necho hi"))
	f.Add([]byte("Q n 8 12 h\n  501  rm -rf /tmp/x\n"))
	f.Fuzz(func(t *testing.T, frame []byte) {
		req, ok := parseGuardRequest(frame, "n")
		if ok && (req.challenge == "" || !strings.HasPrefix(string(frame), "Q n ")) {
			t.Fatalf("accepted %q as %+v", frame, req)
		}
		a := guardAnswer(req.challenge, GuardVerdict{Rule: string(frame), Message: string(frame)})
		if strings.Count(string(a), "\n") != 1 || strings.Count(string(a), "\t") != 4 {
			t.Fatalf("answer %q is not one line of five fields", a)
		}
	})
}
