package controller

import (
	"context"
	"sync"

	"github.com/fleetmux/fleetmux/api"
)

// Learning nodes from NATS. A controller whose gossip seeds are all gone (or not
// joined yet) still sees every node's NATS connection (Presence): such a node is
// added to the table at once (table.present), and the learner asks it, with a
// list request, for what gossip would have said of it (labels, version,
// sessions), so that selectors match it too.

// learner asks nodes known from NATS alone what they are. Its one goroutine is
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
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
			}
			l.mu.Lock()
			names := l.pending
			l.pending = nil
			l.mu.Unlock()
			for _, name := range names {
				var list api.SessionList
				err := c.call(ctx, who, name, api.VerbList, api.Empty{}, &list, c.cfg.RequestTimeout)
				if err != nil || list.Node == nil || list.Node.Name != name {
					if ctx.Err() == nil {
						c.log.Debug("node known from NATS did not say what it is", "node", name, "err", err)
					}
					continue
				}
				meta := *list.Node
				meta.Role = "" // a node; controllers do not answer list
				c.nodes.learned(meta)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// learn hands the names of nodes known from NATS alone to the learner. It never
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
