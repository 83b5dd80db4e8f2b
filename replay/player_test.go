package replay

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPlay(t *testing.T) {
	rec := openSeek(t, true)
	block2, _ := rec.AtBlock(2)
	mid, _ := rec.AtOffset(16)
	tests := []struct {
		name string
		p    Player
		want string
	}{
		{"from the start", Player{Speed: 1000}, seekOutput},
		{"from block 2", Player{Speed: 1000, From: block2}, seekOutput},
		{"from inside a character", Player{Speed: 1000, From: mid}, seekOutput},
		{"with resizes", Player{Speed: 1000, Resize: true}, "hello\r\none\r\n\x1b[8;30;100ttwoé\r\nthree\r\n"},
		{"resizes while fast-forwarding", Player{Speed: 1000, Resize: true, From: block2}, "hello\r\none\r\n\x1b[8;30;100ttwoé\r\nthree\r\n"},
		{"no idle cap", Player{Speed: 1000, MaxIdle: -1}, seekOutput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := tt.p.Play(t.Context(), rec, &out); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Errorf("played %q, want %q", out.String(), tt.want)
			}
		})
	}
}

// TestPlayTiming: pauses are scaled by Speed and capped by MaxIdle (3.5 s of recording
// at speed 10 is 350 ms; capped at 100 ms per pause, 7 pauses at most 70 ms).
func TestPlayTiming(t *testing.T) {
	rec := openSeek(t, false)
	start := time.Now()
	if err := (Player{Speed: 10, MaxIdle: -1}).Play(t.Context(), rec, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 340*time.Millisecond {
		t.Errorf("3.5 s at speed 10 played in %v, want ≥ 350 ms", d)
	}
	// From block 2 (3.5 s in, its output due at once) at normal speed: everything before
	// is fast-forwarded.
	start = time.Now()
	block2, _ := openSeek(t, true).AtBlock(2)
	if err := (Player{From: block2, MaxIdle: -1}).Play(t.Context(), rec, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("playing from block 2 took %v: the part before it was not fast-forwarded", d)
	}
	start = time.Now()
	if err := (Player{Speed: 10, MaxIdle: 100 * time.Millisecond}).Play(t.Context(), rec, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 60*time.Millisecond || d > 340*time.Millisecond {
		t.Errorf("with pauses capped at 100 ms (10 ms at speed 10) played in %v, want ≈ 70 ms", d)
	}
}

// signalWriter reports its first write.
type signalWriter struct {
	once    sync.Once
	written chan struct{}
	mu      sync.Mutex
	b       bytes.Buffer
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.written) })
	return w.b.Write(p)
}

// TestPlayCancel: a Play in a long pause returns ctx's error as soon as ctx ends.
func TestPlayCancel(t *testing.T) {
	var b bytes.Buffer
	w, _ := NewWriter(&b, Header{Width: 80, Height: 24})
	_ = w.Output(0, []byte("first"))
	_ = w.Output(time.Hour, []byte("an hour later"))
	_ = w.Close()
	path := filepath.Join(t.TempDir(), "pause.cast")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()

	ctx, cancel := context.WithCancel(t.Context())
	out := &signalWriter{written: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- (Player{Speed: 1000, MaxIdle: -1}).Play(ctx, rec, out) }() // 3.6 s pause
	select {
	case <-out.written:
	case err := <-done:
		t.Fatalf("Play returned before its pause: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Play wrote nothing")
	}
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("Play: %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("Play took %v to return after cancel", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Play did not return after cancel")
	}
	if got := out.b.String(); got != "first" {
		t.Errorf("wrote %q", got)
	}
	// A cancelled context stops fast-forwarding too.
	if err := (Player{From: mustEnd(t, rec)}).Play(ctx, rec, &bytes.Buffer{}); err != context.Canceled {
		t.Errorf("Play with a cancelled context: %v", err)
	}
}

func mustEnd(t *testing.T, rec *Recording) Position {
	t.Helper()
	p, err := rec.AtOffset(rec.End())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlayErrors(t *testing.T) {
	rec := openSeek(t, false)
	for _, s := range []float64{-1, math.NaN(), math.Inf(1)} {
		if err := (Player{Speed: s}).Play(t.Context(), rec, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "bad speed") {
			t.Errorf("speed %v: %v", s, err)
		}
	}
	err := (Player{Speed: 1000}).Play(t.Context(), rec, failWriter{})
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.HasPrefix(err.Error(), "replay: ") {
		t.Errorf("Play to a failing writer: %v", err)
	}
	if errors.Is(err, context.Canceled) {
		t.Error("a write error reported as cancelled")
	}
}
