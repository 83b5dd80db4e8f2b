package holder

// The exits of all the holder's children, waited for by one goroutine: a session
// parks nothing to learn that its program ended.

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// reaper reaps the children of the holder's sessions. SIGCHLD wakes its goroutine,
// which asks each live session's pid (wait4 with WNOHANG) under that session's
// mutex: a pid is never reaped while held.signal may use it, so the number is not
// reused under a signal. Exits that arrive together, or before the session was
// registered, are found by the same pass: every pass asks every live pid.
type reaper struct {
	wake chan os.Signal // SIGCHLD, and a nudge after each add; buffered 1
	stop chan struct{}  // closed by close
	done chan struct{}  // closed when the goroutine ended

	mu   sync.Mutex // guards live
	live map[*held]struct{}
}

// newReaper starts the holder's reaper; close stops it.
func newReaper() *reaper {
	r := &reaper{wake: make(chan os.Signal, 1), stop: make(chan struct{}), done: make(chan struct{}), live: map[*held]struct{}{}}
	signal.Notify(r.wake, syscall.SIGCHLD)
	go r.loop()
	return r
}

// add makes h's child one to reap. The child may have exited already: add wakes
// the reaper, so that exit is not missed.
func (r *reaper) add(h *held) {
	r.mu.Lock()
	r.live[h] = struct{}{}
	r.mu.Unlock()
	r.nudge()
}

func (r *reaper) nudge() {
	select {
	case r.wake <- syscall.SIGCHLD:
	default: // a pass is due anyway
	}
}

func (r *reaper) loop() {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
		}
		// The token is taken before the pass: an exit after this point sends
		// another, so none is lost.
		r.mu.Lock()
		live := make([]*held, 0, len(r.live))
		for h := range r.live {
			live = append(live, h)
		}
		r.mu.Unlock()
		for _, h := range live {
			if h.reap() {
				r.mu.Lock()
				delete(r.live, h)
				r.mu.Unlock()
			}
		}
	}
}

// close stops the reaper and waits for its goroutine. Children not reaped yet stay
// zombies until the holder exits.
func (r *reaper) close() {
	signal.Stop(r.wake)
	close(r.stop)
	<-r.done
}
