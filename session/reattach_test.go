package session

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReattachTypedBlocks: blocks of commands typed into a program (a nested sh:
// fallback blocks) and output redacted when it was produced survive the agent's
// restart as they were. The next agent, which has no redactor, has the same blocks
// (numbers, commands, offsets, exit codes, the fallback flag, times) and the secret
// is nowhere in its scrollback, its blocks' text or its screen. Before, the replay
// of the holder's raw ring dropped the typed blocks ("sleep 40" took number 3, and
// block 5 was "no such block") and brought the secret back.
func TestReattachTypedBlocks(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		const secret = "AKIAABCDEFGHIJKLMNOP"
		dir := startHolder(t)
		s := startShell(t, shell, func(c *Config) { c.Holder = dialHolder(t, dir); c.Redactor = newLit(secret) })
		run(t, s, "printf '%s%s\\n' AKIAABCDEF GHIJKLMNOP")
		res, err := s.Run(ctxT(t), "sh", RunOptions{Timeout: 50 * time.Millisecond})
		if err != nil || res.Block.State != BlockRunning {
			t.Fatalf("sh: %+v, %v", res.Block, err)
		}
		if _, err := s.Wait(ctxT(t), UntilWaitingInput, 0); err != nil {
			t.Fatal(err)
		}
		if r := run(t, s, "echo typed"); !r.Block.Fallback || !strings.Contains(r.Text, "typed") {
			t.Fatalf("typed into sh: %+v %q", r.Block, r.Text)
		}
		if r := run(t, s, "exit"); !r.Block.Fallback {
			t.Fatalf("exit typed into sh: %+v", r.Block)
		}
		if _, err := s.Wait(ctxT(t), UntilIdle, 0); err != nil {
			t.Fatal(err)
		}
		res, err = s.Run(ctxT(t), "sleep 40", RunOptions{Timeout: 50 * time.Millisecond})
		if err != nil || res.Block.State != BlockRunning || res.Block.N != 5 {
			t.Fatalf("sleep 40: %+v, %v", res.Block, err)
		}
		before := s.Blocks()
		_, end := s.Offsets()
		out, err := s.Read(0, int(end))
		if err != nil || int64(len(out)) != end || strings.Contains(string(out), secret) {
			t.Fatalf("output before the restart: %d of %d bytes, %v; secret in it: %v", len(out), end, err, strings.Contains(string(out), secret))
		}
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}

		rec := recordedOf(before, end)
		rec.Output = func(from, to int64) ([]byte, error) { return out[from:to], nil }
		s2, err := Reattach(Config{ID: "t1", Holder: dialHolder(t, dir)}, rec) // no redactor now
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		after := s2.Blocks()
		if a, b := blocksJSON(t, after), blocksJSON(t, before); a != b {
			t.Fatalf("blocks after the restart:\n%s\nbefore:\n%s", a, b)
		}
		oldest, end2 := s2.Offsets()
		all, err := s2.Read(oldest, int(end2-oldest))
		if err != nil || oldest != 0 || strings.Contains(string(all), secret) || !strings.Contains(string(all), redacted) {
			t.Fatalf("scrollback after the restart from %d: %q, %v", oldest, all, err)
		}
		for _, b := range after {
			r, err := s2.BlockText(b.N, TextOptions{})
			if err != nil || strings.Contains(r.Text, secret) {
				t.Fatalf("block %d after the restart: %q, %v", b.N, r.Text, err)
			}
			if b.N == 3 && strings.TrimSpace(r.Text) != "typed" {
				t.Fatalf("block 3's text after the restart: %q, want the output without the echo and sh's prompt", r.Text)
			}
		}
		if sc, err := s2.Screen(); err != nil || strings.Contains(sc.Text, secret) || !strings.Contains(sc.Text, redacted) {
			t.Fatalf("screen after the restart: %q, %v", sc.Text, err)
		}
	})
}

func blocksJSON(t *testing.T, bs []Block) string {
	t.Helper()
	b, err := json.MarshalIndent(bs, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReattachRingLostCheckpoints: the agent stops reading (Detach) right after a
// block starts, and the block's output then outgrows the holder's ring before the
// next agent attaches: the ring no longer holds any checkpoint. The block is not
// lost: the next agent begins in the state of the newest checkpoint (before the
// ring) and replays the ring from its oldest byte, so the earlier blocks keep
// their numbers, the running block its number and start and ends with its own
// exit code, offsets never go back and numbering goes on. Before, the replay
// began at the ring's oldest byte with nothing known: no block at all.
func TestReattachRingLostCheckpoints(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		const ring = 16 << 10
		dir := startHolder(t)
		gate := filepath.Join(t.TempDir(), "gate")
		if err := unix.Mkfifo(gate, 0o600); err != nil {
			t.Fatal(err)
		}
		s := startShell(t, shell, func(c *Config) { c.Holder = dialHolder(t, dir); c.ScrollbackBytes = ring })
		run(t, s, "echo first")
		if r := run(t, s, "echo second; (exit 3)"); exitCode(r) != 3 {
			t.Fatalf("second block: exit %d %q", exitCode(r), r.Text)
		}
		res, err := s.Run(ctxT(t), "read -r x < "+gate+"; seq 1 5000; echo done; (exit 7)", RunOptions{Timeout: 50 * time.Millisecond})
		if err != nil || res.Block.State != BlockRunning {
			t.Fatalf("long command: %+v, %v", res.Block, err)
		}
		long := res.Block.N
		// The checkpoint at the block's start is the newest the holder will have.
		deadline := time.Now().Add(20 * time.Second)
		for {
			s.mu.Lock()
			started := slices.ContainsFunc(s.ckpts, func(c checkpoint) bool { return c.Cur != nil && c.Cur.N == long })
			s.mu.Unlock()
			if started {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no checkpoint of the running block")
			}
			ch := s.Changed()
			select {
			case <-ch:
			case <-time.After(10 * time.Millisecond): // the sampler may take it, with no broadcast
			}
		}
		before := s.Blocks()
		_, end := s.Offsets()
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
		// No agent reads: the block's output (about 29 KB) wraps the ring.
		f, err := os.OpenFile(gate, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		c := dialHolder(t, dir)
		for {
			st, err := c.Attach(ctxT(t), "t1", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			wrapped := st.From > 0 && st.Info.End > st.From+ring/2
			closeStream(st)
			if wrapped {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the holder's ring did not wrap")
			}
			time.Sleep(20 * time.Millisecond) // polling the holder: it tells no one
		}
		s2, err := Reattach(Config{ID: "t1", Holder: dialHolder(t, dir), ScrollbackBytes: ring}, recordedOf(before, end))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		after := s2.Blocks()
		if len(after) != len(before) {
			t.Fatalf("blocks after reattach: %d, before %d: %+v", len(after), len(before), after)
		}
		for i, b := range before[:len(before)-1] {
			if a := after[i]; a.N != b.N || a.Command != b.Command || a.Start != b.Start || a.End != b.End || exitOf(a) != exitOf(b) {
				t.Fatalf("block %d differs after reattach:\n%+v\n%+v", b.N, a, b)
			}
		}
		r, err := s2.WaitBlock(ctxT(t), long, RunOptions{Timeout: 20 * time.Second})
		if err != nil || r.Block.State != BlockDone || exitCode(r) != 7 || r.Block.Start != before[len(before)-1].Start {
			t.Fatalf("long block after reattach: %+v, %v (before: %+v)", r.Block, err, before[len(before)-1])
		}
		if oldest, end2 := s2.Offsets(); oldest < end || end2 <= oldest {
			t.Fatalf("reattached output [%d, %d), the recording ends at %d", oldest, end2, end)
		}
		if out, err := s2.Read(r.Block.End-100, 100); err != nil || !strings.Contains(string(out), "done") {
			t.Fatalf("the long block's end: %q, %v", out, err)
		}
		r = run(t, s2, "echo two")
		if r.Block.N != long+1 || strings.TrimSpace(r.Text) != "two" {
			t.Fatalf("next block %d %q, want %d", r.Block.N, r.Text, long+1)
		}
	})
}
