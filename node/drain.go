package node

import (
	"sync"
	"sync/atomic"
	"time"
)

// drainLinger is how long a drain's goroutine waits for the next kick once caught
// up before it ends: under a stream of output the drain catches up after almost
// every chunk, and a goroutine per chunk (its start, its stack grown again, its
// exit) cost 12% of the node's CPU per MB; an idle session still has none after it.
const drainLinger = 100 * time.Millisecond

// drain runs a follower's work on demand instead of in a goroutine of its own that
// waits for the session's changes: kick starts a goroutine for do unless one runs,
// and that goroutine calls do again while kicks came in meanwhile, then ends. An
// idle session so costs its publisher, recorder and event pump no goroutine.
//
// No kick is lost: a kick sets pending before it looks at running, and the goroutine
// clears pending before each do and ends only after seeing it still clear under mu,
// so a kick that lands while it decides to end either makes it go on or finds it
// ended and starts another. do never runs concurrently with itself, so what it
// publishes or writes keeps its order.
type drain struct {
	do      func()        // does what is due and returns once caught up
	pending atomic.Bool   // a kick that do has not started after yet
	mu      sync.Mutex    // guards running, stopped and wake
	running bool          // a goroutine runs do (wg counts it)
	stopped bool          // finish was called: no more goroutines
	wake    chan struct{} // wakes the goroutine waiting for a kick (drainLinger); made with the first
	wg      sync.WaitGroup
}

// kick asks for do to run (again). It never blocks: the session calls it with its
// lock held (session.Config.Notify).
func (d *drain) kick() {
	if d.pending.Swap(true) {
		return // the kick that set it starts a goroutine, or the running one sees it
	}
	d.mu.Lock()
	switch {
	case d.running:
		select { // it may be waiting for a kick
		case d.wake <- struct{}{}:
		default:
		}
	case !d.stopped:
		d.running = true
		if d.wake == nil {
			d.wake = make(chan struct{}, 1)
		}
		d.wg.Add(1)
		go d.loop(d.wake)
	}
	d.mu.Unlock()
}

func (d *drain) loop(wake chan struct{}) {
	defer d.wg.Done()
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		d.pending.Store(false)
		d.do()
		for !d.pending.Load() {
			d.mu.Lock()
			stopped := d.stopped // finish does what is left
			if stopped {
				d.running = false
			}
			d.mu.Unlock()
			if stopped {
				return
			}
			if t == nil {
				t = time.NewTimer(drainLinger)
			} else {
				t.Reset(drainLinger)
			}
			select {
			case <-wake:
				continue
			case <-t.C:
			}
			d.mu.Lock()
			if !d.pending.Load() {
				d.running = false
				d.mu.Unlock()
				return
			}
			d.mu.Unlock()
		}
	}
}

// finish starts no more goroutines, ends the one running once it is caught up
// (without its linger), and calls do once more in the caller: what was due before
// finish is done when it returns. It blocks as long as do does.
func (d *drain) finish() {
	d.mu.Lock()
	d.stopped = true
	if d.running {
		select { // a goroutine waiting for a kick ends now
		case d.wake <- struct{}{}:
		default:
		}
	}
	d.mu.Unlock()
	d.wg.Wait()
	d.do()
}
