// Package reclaim returns the memory a burst of work left behind to the OS once a
// process has been quiet for a while.
//
// A Go process keeps the garbage of a burst (session starts, spawns, attaches)
// resident up to the runtime's heap goal, twice the live heap, and hands freed pages
// back only slowly. For a daemon whose steady state is idle (a node agent with idle
// sessions, the holder) that is most of what an idle session seems to cost. After
// a burst, one forced collection that also returns the freed pages
// (debug.FreeOSMemory) brings the resident memory down to what is live; for the
// small heaps of these processes it costs a few milliseconds, once per burst.
package reclaim

import (
	"runtime/debug"
	"sync"
	"time"
)

// Quiet runs debug.FreeOSMemory once no Touch came for its delay. Its methods are
// safe for concurrent use and never block.
type Quiet struct {
	mu      sync.Mutex // guards t and stopped
	t       *time.Timer
	after   time.Duration
	stopped bool
	free    func() // debug.FreeOSMemory; tests count calls
}

// New returns a Quiet that frees memory after quiet spells of d (d > 0).
func New(d time.Duration) *Quiet {
	q := &Quiet{after: d, free: debug.FreeOSMemory}
	q.t = time.AfterFunc(d, func() { q.free() })
	q.t.Stop()
	return q
}

// Touch says work happened: memory is freed once d passed without another Touch.
// A nil Quiet does nothing.
func (q *Quiet) Touch() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.stopped {
		q.t.Reset(q.after)
	}
}

// Stop cancels a pending free; later Touches do nothing. It does not wait for a free
// already running (it holds no resources). Idempotent; a nil Quiet does nothing.
func (q *Quiet) Stop() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.t.Stop()
}
