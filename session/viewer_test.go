package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"
)

// drain reads a viewer until want bytes arrived or the context ends.
func drain(ctx context.Context, v *Viewer, want int64) ([]byte, error) {
	var got []byte
	for int64(len(got)) < want {
		c, err := v.Next(ctx)
		if err != nil {
			return got, err
		}
		got = append(got, c.Data...)
	}
	return got, nil
}

func TestViewersSlowOneDroppedOthersUnaffected(t *testing.T) {
	s := startShell(t, "bash", func(c *Config) { c.ScrollbackBytes = 8 << 20 })
	ctx := ctxT(t)
	_, start := s.Offsets()
	fast := s.Subscribe(start, ViewerOptions{MaxLag: 8 << 20}) // the whole ring: keeps up even under -race
	slow := s.Subscribe(start, ViewerOptions{MaxLag: 64 << 10})
	skip := s.Subscribe(start, ViewerOptions{MaxLag: 64 << 10, SkipAhead: true})

	type res struct {
		data []byte
		err  error
	}
	fastDone := make(chan res, 1)
	go func() {
		// The fast viewer keeps up while the command runs.
		d, err := drain(ctx, fast, 3_000_000)
		fastDone <- res{d, err}
	}()
	// 3 MB of output while the slow viewer reads nothing: the command must finish at
	// full speed regardless.
	r := run(t, s, "head -c 3000000 /dev/zero | tr '\\0' y")
	if r.Block.End-r.Block.Start != 3_000_000 {
		t.Fatalf("block range %d bytes", r.Block.End-r.Block.Start)
	}
	f := <-fastDone
	if f.err != nil {
		t.Fatalf("fast viewer: %v", f.err)
	}
	raw, err := s.Read(start, int(r.Block.End-start))
	if err != nil || !bytes.HasPrefix(raw, f.data[:len(raw)]) && !bytes.HasPrefix(f.data, raw) {
		t.Fatalf("fast viewer bytes differ from the session's record (%v)", err)
	}
	if _, err := slow.Next(ctx); !errors.Is(err, ErrViewerDropped) {
		t.Fatalf("slow viewer: %v, want ErrViewerDropped", err)
	}
	if _, err := slow.Next(ctx); !errors.Is(err, ErrViewerDropped) {
		t.Fatalf("slow viewer stays dropped: %v", err)
	}
	c, err := skip.Next(ctx)
	if err != nil || c.Skipped <= 0 || c.Offset != start+c.Skipped {
		t.Fatalf("skip-ahead viewer: skipped %d at %d (start %d), %v", c.Skipped, c.Offset, start, err)
	}
}

func TestViewerSeesExactStreamAndEOF(t *testing.T) {
	s := startShell(t, "zsh")
	ctx := ctxT(t)
	v := s.Subscribe(0, ViewerOptions{MaxChunk: 7})
	run(t, s, "echo viewer-test")
	run(t, s, "exit 0")
	if _, err := s.Wait(ctx, UntilExited, 0); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		c, err := v.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if c.Offset != int64(len(got)) || len(c.Data) > 7 {
			t.Fatalf("chunk at %d (len %d), want offset %d", c.Offset, len(c.Data), len(got))
		}
		got = append(got, c.Data...)
	}
	_, end := s.Offsets()
	all, _ := s.Read(0, int(end))
	if !bytes.Equal(got, all) || !bytes.Contains(got, []byte("viewer-test\r\n")) {
		t.Fatalf("viewer saw %d bytes, session has %d", len(got), len(all))
	}
	ctx2, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := v.Next(ctx2); !errors.Is(err, io.EOF) {
		t.Fatalf("after EOF: %v", err)
	}
}

// A lingering viewer returns the first output after a quiet spell at once and holds
// output that follows within Linger until Linger has passed, so a burst comes in
// fewer chunks; nothing is lost or reordered.
func TestViewerLinger(t *testing.T) {
	s := startShell(t, "bash")
	ctx := ctxT(t)
	run(t, s, "true") // the first prompt is out
	const linger = 300 * time.Millisecond
	_, from := s.Offsets()
	v := s.Subscribe(from, ViewerOptions{Linger: linger})
	plain := s.Subscribe(from, ViewerOptions{})

	type stamped struct {
		c  Chunk
		at time.Time
	}
	chunks := make(chan stamped, 64)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // reads while the command runs
		defer close(done)
		for {
			c, err := v.Next(rctx)
			if err != nil {
				return
			}
			chunks <- stamped{c, time.Now()}
		}
	}()
	defer func() { stop(); <-done }()

	// Three writes 50 ms apart, then the block's end and the next prompt.
	run(t, s, "printf 'burst-1 '; sleep 0.05; printf 'burst-2 '; sleep 0.05; echo burst-3")
	_, end := s.Offsets()
	var got []byte
	var times []time.Time
	for int64(len(got)) < end-from {
		select {
		case sc := <-chunks:
			if sc.c.Offset != from+int64(len(got)) {
				t.Fatalf("chunk at %d, want %d", sc.c.Offset, from+int64(len(got)))
			}
			got = append(got, sc.c.Data...)
			times = append(times, sc.at)
		case <-ctx.Done():
			t.Fatalf("lingering viewer: %d of %d bytes", len(got), end-from)
		}
	}
	all, err := drain(ctx, plain, end-from)
	if err != nil || !bytes.Equal(got, all) || !bytes.Contains(got, []byte("burst-3")) {
		t.Fatalf("lingering viewer saw %q, the session %q (%v)", got, all, err)
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < linger-5*time.Millisecond {
			t.Fatalf("chunk %d came %v after the one before, within the linger of %v", i, gap, linger)
		}
	}
	// The echo, the three writes 50 ms apart, the end and the prompt: at least four
	// reads, in at most two chunks (the echo at once, the rest a linger later).
	if len(times) > 2 {
		t.Fatalf("%d chunks for a 100 ms burst with a %v linger", len(times), linger)
	}

	// After a quiet spell, output comes without waiting for the linger; and with no
	// Run waiting, nothing lingers: typing is echoed at once, key after key. (The
	// sleep is the quiet spell under test, not synchronisation.)
	time.Sleep(linger)
	for _, key := range []string{"x", "y"} {
		_, from = s.Offsets()
		if err := s.Input([]byte(key)); err != nil { // echoed by the line editor
			t.Fatal(err)
		}
		t0 := time.Now()
		select {
		case sc := <-chunks:
			if len(sc.c.Data) == 0 || sc.c.Offset != from {
				t.Fatalf("echo of %s: chunk at %d, want %d", key, sc.c.Offset, from)
			}
			if took := sc.at.Sub(t0); took >= linger {
				t.Fatalf("the echo of %s waited %v (linger %v) with no Run waiting", key, took, linger)
			}
		case <-ctx.Done():
			t.Fatalf("no echo of %s", key)
		}
	}
}
