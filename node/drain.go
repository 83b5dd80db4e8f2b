package node

import (
	"sync"
	"sync/atomic"
)

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
	do      func()      // does what is due and returns once caught up
	pending atomic.Bool // a kick that do has not started after yet
	mu      sync.Mutex  // guards running and stopped
	running bool        // a goroutine runs do (wg counts it)
	stopped bool        // finish was called: no more goroutines
	wg      sync.WaitGroup
}

// kick asks for do to run (again). It never blocks: the session calls it with its
// lock held (session.Config.Notify).
func (d *drain) kick() {
	if d.pending.Swap(true) {
		return // the kick that set it starts a goroutine, or the running one sees it
	}
	d.mu.Lock()
	if !d.running && !d.stopped {
		d.running = true
		d.wg.Add(1)
		go d.loop()
	}
	d.mu.Unlock()
}

func (d *drain) loop() {
	defer d.wg.Done()
	for {
		d.pending.Store(false)
		d.do()
		d.mu.Lock()
		if !d.pending.Load() {
			d.running = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
	}
}

// finish starts no more goroutines, waits for the one running, and calls do once
// more in the caller: what was due before finish is done when it returns. It blocks
// as long as do does.
func (d *drain) finish() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	d.wg.Wait()
	d.do()
}
