package controller

import (
	"context"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Liveness from two signals (DESIGN "Where this is heading"): gossip, and whether
// the node holds a NATS connection under its own identity. Gossip alone is slow to
// see a killed agent (memberlist's failure detection, ~3 s) and quick to declare a
// CPU-starved one dead; the NATS server sees a killed agent's connection close at
// once and keeps a starved one's open. So:
//
//	gossip alive, connected       alive (suspect after a failed request)
//	gossip alive, not connected   disconnected: nobody can serve it; requests fail
//	                              at once and those in flight are cancelled
//	gossip dead/left, connected   suspect: it keeps serving
//	gossip dead/left, not conn.   dead / left
//
// A gossip member without a NATS connection of its name (a fake member gossiped
// with the fleet's key) is never alive. While the NATS signal is not known (no
// Presence, or the server gives no connection list) gossip alone decides, as
// before, with downGrace.

// Presence is the second liveness signal: which nodes hold a NATS connection now,
// named by their authenticated NATS identity, never by a name a client chose
// (presence.Watcher in production). Implementations are safe for concurrent use.
type Presence interface {
	// Watch calls fn with the set of nodes holding a NATS connection each time it
	// changes, and with known false while it cannot be told. fn runs on the
	// presence's own goroutine and must not block or keep connected. stop ends the
	// watch and returns once fn no longer runs.
	Watch(fn func(connected map[string]bool, known bool)) (stop func(), err error)
}

// connGrace is how long a node whose last NATS connection closed is still
// usable: a client that reconnects at once after a blip (its replies to requests
// in flight still arrive) is not cut off. It is well within the promise that a
// killed agent's requests fail within a second.
const connGrace = 250 * time.Millisecond

// statusOf derives e's status from its signals.
func (t *table) statusOf(e *nodeEntry) string {
	if e.gossip == "" {
		// Known from its NATS connection alone (no gossip about it yet, e.g. a
		// controller whose seeds are gone): the connection is authenticated as
		// that node, so it decides.
		switch {
		case t.known && e.conn && !e.unreachable:
			return api.NodeAlive
		case t.known && !e.conn && !e.lingering:
			return api.NodeDead
		}
		return api.NodeSuspect
	}
	if !t.known {
		switch {
		case e.settled != api.NodeAlive:
			return e.settled
		case e.gossip != api.NodeAlive || e.unreachable:
			return api.NodeSuspect // a notice in its grace, or a failed request
		}
		return api.NodeAlive
	}
	connected := e.conn || e.lingering
	switch {
	case e.gossip == api.NodeAlive && connected:
		if e.unreachable || !e.conn {
			return api.NodeSuspect
		}
		return api.NodeAlive
	case e.gossip == api.NodeAlive:
		return api.NodeDisconnected
	case connected:
		return api.NodeSuspect
	}
	return e.gossip
}

// present applies the NATS signal: the nodes holding a connection now, or known
// false when that cannot be told. A connected node the table does not hold
// (gossip has not told of it) is only heard of: it is added once it answers
// (learned), since alive means answering and a node connects before it serves.
// The names heard of for the first time are returned, for the learner.
func (t *table) present(connected map[string]bool, known bool) (heard []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.known = known
	t.connected = connected
	for name := range t.heard {
		if !known || !connected[name] || t.nodes[name] != nil {
			delete(t.heard, name)
		}
	}
	if known {
		for name, on := range connected {
			if on && t.nodes[name] == nil && !t.heard[name] && api.ValidName(name) == nil {
				t.heard[name] = true
				heard = append(heard, name)
			}
		}
	}
	for name, e := range t.nodes {
		t.setConn(e, known && connected[name])
	}
	return heard
}

// stillHeard reports whether a node heard of from NATS alone is still connected
// and not yet in the table.
func (t *table) stillHeard(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.heard[name]
}

// learned applies what a node known from NATS said of itself when it answered:
// a node heard of is added (alive while connected), one gossip has not spoken of
// gets the node's own word; gossip's word, when there is one, stays.
func (t *table) learned(meta api.NodeMeta) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.nodes[meta.Name]
	if e == nil {
		if !t.heard[meta.Name] {
			return // gone meanwhile
		}
		delete(t.heard, meta.Name)
		e = &nodeEntry{name: meta.Name}
		e.down, e.downDone = context.WithCancel(context.Background())
		t.nodes[meta.Name] = e
		e.meta = meta
		t.setConn(e, t.known && t.connected[meta.Name])
		return
	}
	if e.gossip == "" {
		e.meta = meta
	}
}

// presenceKnown reports whether the NATS signal is known.
func (t *table) presenceKnown() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.known
}

// setConn records whether e holds a NATS connection; one that closes lingers for
// connGrace before e counts as unconnected.
func (t *table) setConn(e *nodeEntry, conn bool) {
	switch {
	case conn:
		e.lingering = false
		if e.connTimer != nil {
			e.connTimer.Stop()
			e.connTimer = nil
		}
	case e.conn && t.connGrace > 0:
		e.lingering = true
		if e.connTimer != nil {
			e.connTimer.Stop()
		}
		var timer *time.Timer
		timer = time.AfterFunc(t.connGrace, func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if e.connTimer == timer {
				e.connTimer, e.lingering = nil, false
				t.derive(e)
			}
		})
		e.connTimer = timer
	case e.conn:
		e.lingering = false
	}
	// Not connected before either: a lingering node keeps its timer.
	e.conn = conn
	t.derive(e)
}

// watchPresence starts the watch of c's Presence (none: gossip alone); Shutdown
// stops it.
func (c *Controller) watchPresence() error {
	if c.cfg.Presence == nil {
		return nil
	}
	stopLearn := c.startLearning()
	stop, err := c.cfg.Presence.Watch(func(connected map[string]bool, known bool) {
		c.learn(c.nodes.present(connected, known))
	})
	if err != nil {
		stopLearn()
		return err
	}
	c.stopPresence = func() {
		stop()
		stopLearn()
	}
	return nil
}
