package gossip

import (
	"bytes"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/hashicorp/memberlist"
)

// delegate is memberlist's Delegate: it serves this member's metadata. memberlist
// calls it with its own locks held, so it only reads g.meta under g.mu.
type delegate struct{ g *Gossip }

func (d delegate) NodeMeta(limit int) []byte {
	d.g.mu.Lock()
	defer d.g.mu.Unlock()
	if len(d.g.meta) > limit { // UpdateMeta checks MaxMetaSize; be safe anyway
		return nil
	}
	return slices.Clone(d.g.meta)
}

func (delegate) NotifyMsg([]byte)                    {}
func (delegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (delegate) LocalState(bool) []byte              { return nil }
func (delegate) MergeRemoteState(buf []byte, _ bool) {}

// eventDelegate is memberlist's EventDelegate. memberlist calls it with its node
// lock held, on its own goroutines: it records the change and signals eventLoop,
// never blocking and never calling back into memberlist.
//
// memberlist v0.7.0 never fills in Node.State (its nodeState.State shadows it), so
// NotifyLeave cannot tell a member that left from one that died. A Gossip about to
// leave therefore first gossips leavingMeta; a member that goes away after that is
// reported MemberLeft, any other MemberDead.
type eventDelegate struct{ g *Gossip }

func (e eventDelegate) NotifyJoin(n *memberlist.Node)   { e.g.observe(n, false) }
func (e eventDelegate) NotifyUpdate(n *memberlist.Node) { e.g.observe(n, false) }
func (e eventDelegate) NotifyLeave(n *memberlist.Node)  { e.g.observe(n, true) }

// leavingMeta is the metadata of a member about to leave. It is valid JSON that
// decodes to an empty api.NodeMeta, in case anything else reads it.
var leavingMeta = []byte(`{"fleetmux":"leaving"}`)

// observe records a memberlist node in the member table and queues it for OnChange.
func (g *Gossip) observe(n *memberlist.Node, gone bool) {
	now := time.Now()
	addr := net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	leaving := bytes.Equal(n.Meta, leavingMeta)
	var meta api.NodeMeta
	if !leaving && len(n.Meta) > 0 {
		if err := json.Unmarshal(n.Meta, &meta); err != nil {
			meta = api.NodeMeta{}
			g.log.Debug("gossip member metadata is not fleetmux JSON", "node", n.Name, "err", err)
		}
	}

	g.mu.Lock()
	defer func() {
		g.mu.Unlock()
		select {
		case g.evSig <- struct{}{}:
		default: // eventLoop has a signal pending already
		}
	}()
	m, known := g.members[n.Name]
	switch {
	case gone:
		m.State = MemberDead
		if g.leaving[n.Name] {
			m.State = MemberLeft
		}
		delete(g.leaving, n.Name)
	case leaving:
		// Keep the last real metadata; the member is still alive until it leaves.
		g.leaving[n.Name] = true
		if known {
			return
		}
		m.State = MemberAlive
	default:
		delete(g.leaving, n.Name)
		m.State = MemberAlive
		m.Meta = meta
	}
	m.Name, m.Addr, m.Since = n.Name, addr, now
	g.members[n.Name] = m
	if g.onChange != nil {
		g.changed[n.Name] = struct{}{}
	}
}

// eventLoop calls OnChange for changed members and forgets long-dead ones.
func (g *Gossip) eventLoop() {
	defer g.loops.Done()
	reap := time.NewTicker(reapAfter / 4)
	defer reap.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-reap.C:
			g.reap(time.Now().Add(-reapAfter))
			continue
		case <-g.evSig:
		}
		g.mu.Lock()
		changed := make([]Member, 0, len(g.changed))
		for name := range g.changed {
			if m, ok := g.members[name]; ok {
				changed = append(changed, m)
			}
		}
		clear(g.changed)
		g.mu.Unlock()
		slices.SortFunc(changed, func(a, b Member) int { return a.Since.Compare(b.Since) })
		for _, m := range changed {
			select {
			case <-g.stop:
				return
			default:
			}
			g.onChange(m)
		}
	}
}

// reap drops dead and left members whose state is older than before.
func (g *Gossip) reap(before time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, m := range g.members {
		if (m.State == MemberDead || m.State == MemberLeft) && m.Since.Before(before) {
			delete(g.members, name)
		}
	}
}

// metaLoop pushes metadata changes to the cluster, one at a time; changes made
// during a push are coalesced into the next.
func (g *Gossip) metaLoop() {
	defer g.loops.Done()
	for {
		select {
		case <-g.stop:
			return
		case <-g.metaSig:
		}
		if err := g.ml.UpdateNode(time.Second); err != nil {
			g.log.Debug("gossip metadata push not confirmed", "node", g.name, "err", err)
		}
	}
}
