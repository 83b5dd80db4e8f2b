package delay

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

type sink struct {
	mu  sync.Mutex
	got []int
}

func (s *sink) send(m int) {
	s.mu.Lock()
	s.got = append(s.got, m)
	s.mu.Unlock()
}

func (s *sink) snapshot() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// Nothing is sent by Add itself; the delay sends everything, in order.
func TestQueueSendsLaterInOrder(t *testing.T) {
	var s sink
	q := New(20*time.Millisecond, s.send)
	defer q.Close()
	t0 := time.Now()
	for i := range 5 {
		q.Add(i)
	}
	if got := s.snapshot(); len(got) != 0 {
		t.Fatalf("sent during Add: %v", got)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return len(s.snapshot()) == 5 }, "the batch sent")
	if d := time.Since(t0); d < 20*time.Millisecond {
		t.Fatalf("sent %v after the first Add, before the delay", d)
	}
	q.Add(5) // a second batch on the same timer
	testutil.Eventually(t, 5*time.Second, func() bool { return len(s.snapshot()) == 6 }, "the second batch sent")
	if got := s.snapshot(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("sent %v", got)
	}
}

// Close sends what is held at once; later Adds send at once; concurrent Adds keep
// each goroutine's order.
func TestQueueClose(t *testing.T) {
	var s sink
	q := New(time.Hour, s.send)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				q.Add(g*1000 + i)
			}
		}()
	}
	wg.Wait()
	if got := s.snapshot(); len(got) != 0 {
		t.Fatalf("sent before the delay: %d", len(got))
	}
	q.Close()
	got := s.snapshot()
	if len(got) != 400 {
		t.Fatalf("Close sent %d of 400", len(got))
	}
	last := map[int]int{0: -1, 1: -1, 2: -1, 3: -1}
	for _, m := range got {
		if g, i := m/1000, m%1000; i <= last[g] {
			t.Fatalf("goroutine %d: %d after %d", g, i, last[g])
		} else {
			last[g] = i
		}
	}
	q.Add(7)
	if got := s.snapshot(); got[len(got)-1] != 7 {
		t.Fatal("an Add after Close was not sent at once")
	}
	q.Close() // idempotent
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a done context = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("Sleep on a done context waited %v", d)
	}
}
