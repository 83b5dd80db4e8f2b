package controller

import (
	"sync"
	"sync/atomic"
)

// shared gives the controller's streams one bus subscription per subject, however
// many of them follow it: twenty people watching one session cost the bus (and the
// node's connection) one copy of its output, not twenty. Each follower's callback
// gets every message, in the bus's order, on the bus's delivery goroutine; a
// callback must not block (the streams' callbacks queue into a bounded channel and
// drop past it, then catch up from the node), so no follower slows another, the
// subscription, or the session.
type shared struct {
	bus  Bus
	mu   sync.Mutex
	subs map[string]*sharedSub
	next uint64
}

// sharedSub is one subject's bus subscription and its followers.
type sharedSub struct {
	ready chan struct{} // closed once the bus subscription is made (or failed: err)
	err   error
	stop  func() error
	// delivering is held (read) while a message goes to the followers: a
	// follower that leaves waits for the delivery in progress.
	delivering sync.RWMutex
	// fns is the followers' callbacks, copied on every change (the delivery path
	// reads it without a lock).
	fns atomic.Pointer[[]sharedFn]
	n   int // followers, under shared.mu
}

type sharedFn struct {
	id uint64
	fn func(subject string, header map[string]string, data []byte)
}

func newShared(bus Bus) *shared { return &shared{bus: bus, subs: map[string]*sharedSub{}} }

// Subscribe calls fn for every message on subject until stop is called, like
// Bus.Subscribe, over the subject's one bus subscription. stop waits until fn is no
// longer running; the last follower's stop ends the bus subscription.
func (s *shared) Subscribe(subject string, fn func(subject string, header map[string]string, data []byte)) (stop func() error, err error) {
	s.mu.Lock()
	s.next++
	me := sharedFn{id: s.next, fn: fn}
	sub, ok := s.subs[subject]
	if !ok {
		sub = &sharedSub{ready: make(chan struct{})}
		s.subs[subject] = sub
	}
	sub.n++
	sub.add(me)
	s.mu.Unlock()

	if !ok {
		// The first follower makes the bus subscription (not under s.mu: it waits
		// for the server), the others wait for it.
		sub.stop, sub.err = s.bus.Subscribe(subject, func(subj string, h map[string]string, data []byte) {
			sub.delivering.RLock()
			defer sub.delivering.RUnlock()
			for _, f := range *sub.fns.Load() {
				f.fn(subj, h, data)
			}
		})
		close(sub.ready)
	}
	<-sub.ready
	if sub.err != nil {
		s.leave(subject, sub, me.id)
		return nil, sub.err
	}
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() { err = s.leave(subject, sub, me.id) })
		return err
	}, nil
}

// leave removes follower id from sub; the last one out ends the bus subscription.
// Once it returns, the follower's fn is no longer running nor called (a callback
// must not call its own stop).
func (s *shared) leave(subject string, sub *sharedSub, id uint64) error {
	s.mu.Lock()
	sub.remove(id)
	sub.n--
	last := sub.n == 0
	if last && s.subs[subject] == sub {
		delete(s.subs, subject)
	}
	s.mu.Unlock()
	if !last {
		// A barrier: a delivery in progress may still call the follower's fn.
		sub.delivering.Lock()
		sub.delivering.Unlock() //lint:ignore SA2001 the barrier above
		return nil
	}
	if sub.stop == nil {
		return nil
	}
	return sub.stop()
}

// add and remove replace the callback list (under shared.mu).
func (sub *sharedSub) add(f sharedFn) {
	var fns []sharedFn
	if old := sub.fns.Load(); old != nil {
		fns = append(fns, *old...)
	}
	fns = append(fns, f)
	sub.fns.Store(&fns)
}

func (sub *sharedSub) remove(id uint64) {
	var fns []sharedFn
	for _, f := range *sub.fns.Load() {
		if f.id != id {
			fns = append(fns, f)
		}
	}
	sub.fns.Store(&fns)
}
