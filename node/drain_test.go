package node

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDrainNoLostKick: every kick is followed by a run of do that starts after it,
// even when it lands while the goroutine decides to end; do never runs twice at
// once; and nothing runs once caught up.
func TestDrainNoLostKick(t *testing.T) {
	var (
		kicked  atomic.Int64 // kicks made so far
		seen    atomic.Int64 // kicks made before the latest do started
		running atomic.Bool
		overlap atomic.Bool
	)
	d := &drain{}
	d.do = func() {
		if !running.CompareAndSwap(false, true) {
			overlap.Store(true)
		}
		seen.Store(kicked.Load())
		// A little work, so kicks land while it runs and while it ends.
		for t0 := time.Now(); time.Since(t0) < 20*time.Microsecond; {
		}
		running.Store(false)
	}
	const kickers, each = 4, 500
	var wg sync.WaitGroup
	for range kickers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				kicked.Add(1)
				d.kick()
				if i%3 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for seen.Load() != kickers*each {
		if time.Now().After(deadline) {
			t.Fatalf("the last do saw %d of %d kicks: a kick was lost", seen.Load(), kickers*each)
		}
		time.Sleep(time.Millisecond)
	}
	if overlap.Load() {
		t.Fatal("do ran twice at once")
	}
	// Caught up: the goroutine ends.
	deadline = time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		r := d.running
		d.mu.Unlock()
		if !r {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the drain's goroutine did not end once caught up")
		}
		time.Sleep(time.Millisecond)
	}
	d.finish()
	d.kick() // after finish: no goroutine
	d.mu.Lock()
	r := d.running
	d.mu.Unlock()
	if r {
		t.Fatal("a kick after finish started a goroutine")
	}
}
