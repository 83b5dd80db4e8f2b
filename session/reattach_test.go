package session

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
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
