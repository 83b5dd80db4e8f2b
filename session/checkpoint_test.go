package session

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestHolderReattachWrapped: a session whose output outgrew the holder's ring
// (here 16 KiB) is rebuilt from a checkpoint: after the agent's restart its
// offsets end where they did, blocks keep their numbers, commands and exit codes, a
// command that was running ends with its real exit code, and numbering goes on.
// Before checkpoints, the rebuilt offsets jumped to the holder's raw offset, the
// blocks were renumbered from 1 and the running block was gone ("no such block").
func TestHolderReattachWrapped(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		const ring = 16 << 10
		dir := startHolder(t)
		s := startShell(t, shell, func(c *Config) { c.Holder = dialHolder(t, dir); c.ScrollbackBytes = ring })
		run(t, s, "seq 1 30000 | head -c 100000; echo")
		if r := run(t, s, "echo after; (exit 3)"); exitCode(r) != 3 {
			t.Fatalf("second block: exit %d %q", exitCode(r), r.Text)
		}
		res, err := s.Run(ctxT(t), "seq 1 5000; sleep 1; echo done; (exit 7)", RunOptions{Timeout: 100 * time.Millisecond})
		if err != nil || res.Block.State != BlockRunning {
			t.Fatalf("long command: %+v, %v", res.Block, err)
		}
		long := res.Block.N
		waitOutputTail(t, s, "5000")
		before := s.Blocks()
		_, end := s.Offsets()
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
		s2, err := Reattach(Config{ID: "t1", Holder: dialHolder(t, dir), ScrollbackBytes: ring}, recordedOf(before, end))
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if _, end2 := s2.Offsets(); end2 < end {
			t.Fatalf("reattached output ends at %d, before %d", end2, end)
		}
		after := s2.Blocks()
		if len(after) < len(before) {
			t.Fatalf("blocks after reattach: %d, before %d: %+v", len(after), len(before), after)
		}
		for i, b := range before[:len(before)-1] {
			a := after[i]
			if a.N != b.N || a.Command != b.Command || a.Start != b.Start || a.End != b.End || exitOf(a) != exitOf(b) {
				t.Fatalf("block %d differs after reattach:\n%+v\n%+v", b.N, a, b)
			}
		}
		r, err := s2.WaitBlock(ctxT(t), long, RunOptions{Timeout: 20 * time.Second})
		if err != nil || r.Block.State != BlockDone || exitCode(r) != 7 || r.Block.Start != before[len(before)-1].Start {
			t.Fatalf("long block after reattach: %+v, %v (before: %+v)", r.Block, err, before[len(before)-1])
		}
		oldest, _ := s2.Offsets() // the ring begins at the checkpoint
		if out, err := s2.Read(max(oldest, r.Block.End-200), 200); err != nil || !strings.Contains(string(out), "done") {
			t.Fatalf("the long block's end: %q, %v", out, err)
		}
		r = run(t, s2, "echo two")
		if r.Block.N != long+1 || strings.TrimSpace(r.Text) != "two" {
			t.Fatalf("next block %d %q, want %d", r.Block.N, r.Text, long+1)
		}
	})
}

// recordedOf is what a recording of blocks up to offset end has: the finished
// blocks whole, the running ones only started (N and command).
func recordedOf(blocks []Block, end int64) Recorded {
	rec := Recorded{End: end}
	for _, b := range blocks {
		if b.State != BlockDone {
			b = Block{N: b.N, Command: b.Command}
		}
		rec.Blocks = append(rec.Blocks, b)
	}
	return rec
}

// waitOutputTail waits until the session's output so far contains want.
func waitOutputTail(t *testing.T, s *Session, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, end := s.Offsets()
		out, _ := s.Read(max(0, end-4096), 4096)
		if strings.Contains(string(out), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output: …%q", want, out[max(0, len(out)-300):])
		}
		ch := s.Changed()
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		}
	}
}

func TestPickCheckpoint(t *testing.T) {
	done := func(ns ...int) []Block {
		var out []Block
		for _, n := range ns {
			out = append(out, Block{N: n, State: BlockDone})
		}
		return out
	}
	cur := func(n int) *checkpointBlock { return &checkpointBlock{N: n} }
	cs := []checkpoint{
		{Raw: 100, Off: 90, Blocks: 1, Cur: cur(1)},
		{Raw: 200, Off: 180, Blocks: 1},
		{Raw: 300, Off: 270, Blocks: 2, Cur: cur(2)},
		{Raw: 400, Off: 360, Blocks: 3},
	}
	for _, tc := range []struct {
		name  string
		start int64
		rec   Recorded
		want  int64 // Raw of the pick, -1 none
	}{
		{"newest", 50, Recorded{Blocks: done(1, 2, 3), End: 1000}, 400},
		{"the recording lags", 50, Recorded{Blocks: done(1, 2, 3), End: 300}, 300},
		{"a block not in the index", 50, Recorded{Blocks: done(1, 2), End: 1000}, 300},
		{"only a started block", 50, Recorded{Blocks: append(done(1), Block{N: 2}), End: 1000}, 300},
		{"ring moved past older ones", 350, Recorded{Blocks: done(1, 2), End: 1000}, -1},
		{"nothing recorded", 50, Recorded{}, -1},
		{"the first, running", 50, Recorded{End: 95}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pickCheckpoint(cs, tc.start, tc.rec)
			switch {
			case tc.want < 0 && got != nil:
				t.Fatalf("picked %+v, want none", *got)
			case tc.want >= 0 && (got == nil || got.Raw != tc.want):
				t.Fatalf("picked %+v, want raw %d", got, tc.want)
			}
		})
	}
	// A running block with a command typed into its program after it (block 2).
	if got := pickCheckpoint([]checkpoint{{Raw: 10, Off: 5, Blocks: 2, Cur: cur(1)}}, 0, Recorded{Blocks: done(2), End: 100}); got == nil {
		t.Fatal("a checkpoint whose running block has a typed block after it: none picked")
	}
	if got := pickCheckpoint([]checkpoint{{Raw: 10, Off: 5, Blocks: 2, Cur: cur(3)}}, 0, Recorded{Blocks: done(1, 2), End: 100}); got != nil {
		t.Fatalf("a checkpoint whose running block is past its blocks: picked %+v", *got)
	}
}

// TestCheckpointsDespiteMarkStarts: a program that ends each of its writes with the
// start of a mark (which the scanner holds back, waiting for the rest) still gets
// checkpoints: the held-back bytes are replayed from the holder. The review's
// attack: 40 such writes of 4 KB through a 16 KiB ring left no checkpoint, and
// after a restart the blocks were renumbered from 1 and the running one was gone.
func TestCheckpointsDespiteMarkStarts(t *testing.T) {
	const ring = 16 << 10
	dir := startHolder(t)
	s := startShell(t, "bash", func(c *Config) { c.Holder = dialHolder(t, dir); c.ScrollbackBytes = ring })
	run(t, s, "echo first-command")
	run(t, s, "echo second-command; (exit 5)")
	res, err := s.Run(ctxT(t), `f=$(printf '%04000d' 0); for i in $(seq 1 40); do printf '\033]133;fm=%s' "$f"; sleep 0.01; done; echo flood-done; sleep 30`, RunOptions{Timeout: 100 * time.Millisecond})
	if err != nil || res.Block.State != BlockRunning {
		t.Fatalf("flood: %+v, %v", res.Block, err)
	}
	// The last write's mark start is held back (flood-done may still be inside
	// it): wait for the holder's raw output, which the read loop has taken in.
	deadline := time.Now().Add(20 * time.Second)
	for s.hold.raw.Load() < 40*4000 {
		if time.Now().After(deadline) {
			t.Fatalf("the flood did not come: %d raw bytes", s.hold.raw.Load())
		}
		ch := s.Changed()
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		}
	}
	before := s.Blocks()
	_, end := s.Offsets()
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	s2, err := Reattach(Config{ID: "t1", Holder: dialHolder(t, dir), ScrollbackBytes: ring}, recordedOf(before, end))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	after := s2.Blocks()
	if _, end2 := s2.Offsets(); end2 < end || len(after) != len(before) {
		t.Fatalf("after the restart: %d blocks ending at %d, before %d ending at %d", len(after), end2, len(before), end)
	}
	for i, b := range before[:len(before)-1] {
		if a := after[i]; a.N != b.N || a.Command != b.Command || exitOf(a) != exitOf(b) {
			t.Fatalf("block %d after the restart: %+v, before %+v", b.N, a, b)
		}
	}
	if last := after[len(after)-1]; last.N != res.Block.N || last.State != BlockRunning {
		t.Fatalf("the running block after the restart: %+v, want block %d running", last, res.Block.N)
	}
}

// TestAddCheckpoint: a session keeps its newest four kept checkpoints (for a ring
// that wraps) and its newest two event ones (the newest may be ahead of the
// recording when the agent dies), oldest first.
func TestAddCheckpoint(t *testing.T) {
	var cs []checkpoint
	for i := 1; i <= 12; i++ {
		cs = addCheckpoint(cs, checkpoint{Raw: int64(i), Event: i%3 != 0})
	}
	var got []int64
	for _, c := range cs {
		got = append(got, c.Raw)
	}
	if want := []int64{3, 6, 9, 10, 11, 12}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
}
