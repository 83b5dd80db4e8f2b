package reclaim

import (
	"sync/atomic"
	"testing"
	"time"
)

func newCounting(d time.Duration) (*Quiet, *atomic.Int32) {
	var n atomic.Int32
	q := New(d)
	q.free = func() { n.Add(1) }
	return q, &n
}

func waitCount(t *testing.T, n *atomic.Int32, want int32, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for n.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("freed %d times, want %d", n.Load(), want)
		}
		time.Sleep(time.Millisecond) // polling a counter, with a deadline
	}
}

// TestQuiet: a burst of touches frees once, after the quiet spell; nothing frees
// without a touch, and nothing after Stop.
func TestQuiet(t *testing.T) {
	q, n := newCounting(20 * time.Millisecond)
	for range 50 {
		q.Touch()
	}
	waitCount(t, n, 1, 5*time.Second)
	q.Touch()
	waitCount(t, n, 2, 5*time.Second)
	q.Touch()
	q.Stop()
	q.Stop()
	q.Touch()
	if q.t.Stop() { // a Touch after Stop armed the timer again
		t.Fatal("a Touch after Stop scheduled a free")
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("freed %d times after Stop, want 2", got)
	}
	var nilQ *Quiet
	nilQ.Touch()
	nilQ.Stop()
}

// TestQuietWaitsForTheBurst: touches closer together than the delay postpone the
// free until they stop.
func TestQuietWaitsForTheBurst(t *testing.T) {
	q, n := newCounting(50 * time.Millisecond)
	defer q.Stop()
	end := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(end) {
		q.Touch()
		if n.Load() != 0 {
			t.Fatal("freed during the burst")
		}
		time.Sleep(5 * time.Millisecond) // the burst's pace
	}
	waitCount(t, n, 1, 5*time.Second)
}
