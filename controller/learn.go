package controller

import (
	"context"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Learning nodes from NATS. A controller whose gossip seeds are all gone (or not
// joined yet) still sees every node's NATS connection (Presence). Such a node is
// heard of (table.present); the learner asks it, with a list request, what it
// is (labels, version, sessions), and once it answers it is in the table, alive
// while connected, so that it is listed, routed to and matched by selectors. A
// node connects before it serves: the learner asks again every learnRetry while
// the node stays connected and unanswered.

// learnRetry is how soon the learner asks a node that did not answer again.
const learnRetry = 500 * time.Millisecond

// learner asks nodes heard of from NATS what they are. Its one goroutine is
// started by startLearning and stopped by the func it returns.
type learner struct {
	mu      sync.Mutex // guards pending
	pending []string
	wake    chan struct{} // signalled when pending grows
}

// startLearning starts the learner; the func it returns stops it and waits.
func (c *Controller) startLearning() (stop func()) {
	l := &learner{wake: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	c.learning.Store(l)
	go func() { // owned by the controller: stop waits for it
		defer close(done)
		who := principal{actor: "controller:" + c.cfg.Name, id: "controller:" + c.cfg.Name, role: api.RoleViewer}
		var retry []string
		for {
			var timer *time.Timer
			var tick <-chan time.Time
			if len(retry) > 0 {
				timer = time.NewTimer(learnRetry)
				tick = timer.C
			}
			select {
			case <-ctx.Done():
			case <-l.wake:
			case <-tick:
			}
			if timer != nil {
				timer.Stop()
			}
			if ctx.Err() != nil {
				return
			}
			l.mu.Lock()
			names := append(retry, l.pending...)
			l.pending, retry = nil, nil
			l.mu.Unlock()
			for _, name := range names {
				if !c.nodes.stillHeard(name) || ctx.Err() != nil {
					continue
				}
				var list api.SessionList
				err := c.send(ctx, who, name, api.VerbList, api.Empty{}, &list, c.cfg.RequestTimeout, ctx)
				if err != nil || list.Node == nil || list.Node.Name != name {
					retry = append(retry, name)
					continue
				}
				meta := *list.Node
				meta.Role = "" // a node: controllers do not answer list
				c.nodes.learned(meta)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// learn hands the names of nodes heard of from NATS to the learner. It never
// blocks: it runs on the presence watch's goroutine.
func (c *Controller) learn(names []string) {
	l := c.learning.Load()
	if len(names) == 0 || l == nil {
		return
	}
	l.mu.Lock()
	l.pending = append(l.pending, names...)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}
