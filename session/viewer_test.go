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
