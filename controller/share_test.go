package controller

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// countingBus is a real NATS connection that counts its subscriptions.
type countingBus struct {
	*transport.Conn
	subs, stops atomic.Int32
}

func (b *countingBus) Subscribe(subject string, fn func(string, map[string]string, []byte)) (func() error, error) {
	stop, err := b.Conn.Subscribe(subject, fn)
	if err != nil {
		return nil, err
	}
	b.subs.Add(1)
	return func() error { b.stops.Add(1); return stop() }, nil
}

// TestSharedSubscription: twenty followers of one subject make one subscription
// on the bus, each gets every message in order, and the last one out ends it; on
// the old code (a bus subscription per follower) the bus has twenty.
func TestSharedSubscription(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	conn, err := transport.Connect(context.Background(), transport.NATSConfig{URL: srv.ClientURL(), Name: "share", Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bus := &countingBus{Conn: conn}
	sh := newShared(bus)

	const followers, msgs = 20, 50
	var (
		mu   sync.Mutex
		got  = make([][]string, followers)
		stop = make([]func() error, followers)
	)
	var wg sync.WaitGroup
	for i := range followers { // at once: the first makes the subscription, the others wait for it
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := sh.Subscribe("fm.test.out", func(_ string, _ map[string]string, data []byte) {
				mu.Lock()
				got[i] = append(got[i], string(data))
				mu.Unlock()
			})
			if err != nil {
				t.Error(err)
				return
			}
			stop[i] = s
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if n := bus.subs.Load(); n != 1 {
		t.Fatalf("%d followers made %d bus subscriptions, want 1", followers, n)
	}
	for k := range msgs {
		if err := conn.Publish("fm.test.out", nil, []byte{byte('A' + k%26)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range got {
			if len(g) < msgs {
				return false
			}
		}
		return true
	}, "every follower to get every message")
	mu.Lock()
	for i, g := range got {
		for k, m := range g {
			if m != string(rune('A'+k%26)) {
				t.Fatalf("follower %d: message %d is %q: out of order", i, k, m)
			}
		}
	}
	mu.Unlock()

	// All but one leave: the subscription stays, and the ones gone get nothing more.
	for i := 1; i < followers; i++ {
		if err := stop[i](); err != nil {
			t.Fatal(err)
		}
	}
	if n := bus.stops.Load(); n != 0 {
		t.Fatalf("the bus subscription ended with a follower left (%d stops)", n)
	}
	if err := conn.Publish("fm.test.out", nil, []byte("last")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got[0]) == msgs+1 }, "the last follower's message")
	mu.Lock()
	if len(got[1]) != msgs {
		t.Errorf("a follower that left got %d messages, want %d", len(got[1]), msgs)
	}
	mu.Unlock()
	if err := stop[0](); err != nil {
		t.Fatal(err)
	}
	stop[0]() // twice: nothing more
	if n := bus.stops.Load(); n != 1 {
		t.Fatalf("the last follower out: %d bus stops, want 1", n)
	}
	// A new follower subscribes again.
	s, err := sh.Subscribe("fm.test.out", func(string, map[string]string, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	if n := bus.subs.Load(); n != 2 {
		t.Fatalf("a follower after the last left: %d bus subscriptions in all, want 2", n)
	}
	s()
}
