package controller

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Member is one gossip member as the membership layer reports it. cmd adapts the
// transport's member type to this one.
type Member struct {
	Name  string
	Addr  string       // host:port of its gossip listener
	State string       // api.NodeAlive, api.NodeDead or api.NodeLeft
	Meta  api.NodeMeta // what it gossips about itself
}

// nodeEntry is one row of the node table. Its status is derived (table.derive)
// from two signals: gossip, and whether the node holds a NATS connection.
type nodeEntry struct {
	name    string
	addr    string
	status  string // derived: api.NodeAlive, NodeSuspect, NodeDisconnected, NodeDead, NodeLeft
	meta    api.NodeMeta
	since   time.Time
	created int // sessions created through this controller since the last gossip update
	// gossip is what gossip said last (api.NodeAlive, NodeDead, NodeLeft); settled
	// is the same once a dead or left notice has outlived the grace (downGrace),
	// which counts when the NATS signal is not known.
	gossip, settled string
	// unreachable: a request to it failed (no responders, a timeout) since gossip or
	// a request last showed it well; shown suspect.
	unreachable bool
	// conn: it holds a NATS connection (Presence); lingering: its last one closed
	// less than connGrace ago.
	conn, lingering bool
	// down is cancelled when the node stops being usable: requests in flight to it
	// are cancelled (context.AfterFunc: no goroutine per request). A node that
	// comes back gets a new one.
	down      context.Context
	downDone  context.CancelFunc
	timer     *time.Timer // pending dead/left notice (downGrace)
	connTimer *time.Timer // pending end of lingering (connGrace)
	gen       int         // bumped by every gossip change; a timer applies only to its own
}

// table is the node table. It holds nothing the nodes, gossip and the NATS server
// cannot rebuild. Its methods are safe for concurrent use and never block on I/O.
type table struct {
	mu    sync.Mutex // guards every field below and every entry's fields
	nodes map[string]*nodeEntry
	now   func() time.Time
	grace time.Duration // downGrace; 0 in table tests: notices apply at once
	// known: the NATS signal is known (Presence delivered a connection list);
	// connected is the set of nodes holding a NATS connection then.
	known     bool
	connected map[string]bool
	connGrace time.Duration
	// heard: nodes connected to NATS that the table does not hold yet, until
	// they answer (learned) or go.
	heard map[string]bool
}

func newTable(grace time.Duration) *table {
	return &table{nodes: map[string]*nodeEntry{}, heard: map[string]bool{}, now: time.Now, grace: grace, connGrace: connGrace}
}

// downGrace is how long a node reported dead or gone stays suspect before the
// table believes it when gossip is the only signal: memberlist can report a
// member that restarts quickly as gone after it is back (a stale notice relayed
// by another member), and the notice that it is alive again follows within
// moments. Requests still go to a suspect node; a node that is really gone fails
// them at once (nobody serves its subjects), and requests in flight are cancelled
// when the grace ends. With the NATS signal known, a gossip notice is believed at
// once: it never makes a connected node dead (liveness.go).
const downGrace = time.Second

// observe applies one membership change. Controllers are not nodes and are ignored.
func (t *table) observe(m Member) {
	if m.Meta.Role == api.RoleController || api.ValidName(m.Name) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.nodes[m.Name]
	if e == nil {
		e = &nodeEntry{name: m.Name, conn: t.connected[m.Name]}
		e.down, e.downDone = context.WithCancel(context.Background())
		t.nodes[m.Name] = e
	}
	status := m.State
	switch status {
	case api.NodeAlive, api.NodeDead, api.NodeLeft:
	default:
		status = api.NodeDead
	}
	e.addr = m.Addr
	if m.Meta.Name != "" || status == api.NodeAlive {
		e.meta = m.Meta
		e.created = 0
	}
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.gen++
	e.gossip = status
	if status == api.NodeAlive {
		e.unreachable = false
	}
	if status != api.NodeAlive && e.settled == api.NodeAlive && t.grace > 0 {
		// Believe it after the grace, unless the node is back by then.
		gen := e.gen
		e.timer = time.AfterFunc(t.grace, func() { t.settle(m.Name, gen, status) })
	} else {
		e.settled = status
	}
	t.derive(e)
}

// settle applies a dead or left notice once its grace has passed.
func (t *table) settle(name string, gen int, status string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.nodes[name]; e != nil && e.gen == gen && e.timer != nil {
		e.timer = nil
		e.settled = status
		t.derive(e)
	}
}

// derive sets e's status from its signals, cancels requests in flight when it is
// no longer usable, and gives it a new down context when it is usable again.
func (t *table) derive(e *nodeEntry) {
	status := t.statusOf(e)
	if status == e.status {
		return
	}
	wasUsable := e.status == "" || usable(e.status)
	e.since = t.now()
	switch {
	case usable(status) && !wasUsable:
		e.down, e.downDone = context.WithCancel(context.Background()) // came back
	case !usable(status) && wasUsable:
		e.downDone()
	}
	e.status = status
}

// close stops the timers.
func (t *table) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.nodes {
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		if e.connTimer != nil {
			e.connTimer.Stop()
			e.connTimer = nil
		}
	}
}

// lookup returns a node's status and a context cancelled when it goes down; ok
// false for an unknown node (and down nil).
func (t *table) lookup(name string) (status string, down context.Context, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.nodes[name]
	if e == nil {
		return "", nil, false
	}
	return e.status, e.down, true
}

// size is how many nodes the table holds, in any status.
func (t *table) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.nodes)
}

// suspect marks a node suspect: gossip says it is alive, but it did not answer.
// ok clears a suspicion after a successful request.
func (t *table) suspect(name string) { t.setReachable(name, false) }
func (t *table) ok(name string)      { t.setReachable(name, true) }

func (t *table) setReachable(name string, reachable bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.nodes[name]
	if e == nil {
		return
	}
	e.unreachable = !reachable
	t.derive(e)
}

// list returns the table as API nodes, sorted by name.
func (t *table) list() []api.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]api.Node, 0, len(t.nodes))
	for _, e := range t.nodes {
		out = append(out, e.apiNode())
	}
	slices.SortFunc(out, func(a, b api.Node) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

func (e *nodeEntry) apiNode() api.Node {
	n := api.Node{
		Name: e.name, Status: e.status, Labels: maps.Clone(e.meta.Labels), Addr: e.addr,
		Version: e.meta.Version, Sessions: e.meta.Sessions + e.created, Proto: e.meta.Proto,
		Sandbox: e.meta.Sandbox,
	}
	if !e.since.IsZero() {
		n.Since = e.since.UTC().Format(time.RFC3339)
	}
	return n
}

// usable reports whether requests may go to a node in this status.
func usable(status string) bool { return status == api.NodeAlive || status == api.NodeSuspect }

// selectNodes returns the names of usable nodes that carry every label in labels
// (all usable nodes for an empty map), sorted.
func (t *table) selectNodes(labels map[string]string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for name, e := range t.nodes {
		if !usable(e.status) {
			continue
		}
		match := true
		for k, v := range labels {
			if e.meta.Labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// pick chooses the node for a new session: the alive node with the fewest sessions
// (by gossip, plus those created here since), ties by name. It counts the new
// session at once so that a burst of creates spreads over the nodes.
func (t *table) pick() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var best *nodeEntry
	for _, e := range t.nodes {
		if e.status != api.NodeAlive {
			continue
		}
		n, bn := e.meta.Sessions+e.created, 0
		if best != nil {
			bn = best.meta.Sessions + best.created
		}
		if best == nil || n < bn || n == bn && e.name < best.name {
			best = e
		}
	}
	if best == nil {
		return "", false
	}
	best.created++
	return best.name, true
}

// counts returns how many nodes are in each status, and the sessions of usable nodes.
func (t *table) counts() (byStatus map[string]int, sessions int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	byStatus = map[string]int{api.NodeAlive: 0, api.NodeSuspect: 0, api.NodeDisconnected: 0, api.NodeDead: 0, api.NodeLeft: 0}
	for _, e := range t.nodes {
		byStatus[e.status]++
		if usable(e.status) {
			sessions += e.meta.Sessions
		}
	}
	return byStatus, sessions
}

// published returns the output bytes each usable node has published (as gossiped).
func (t *table) published() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int64{}
	for name, e := range t.nodes {
		if usable(e.status) {
			out[name] = e.meta.Published
		}
	}
	return out
}
