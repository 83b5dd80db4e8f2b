package controller

import "github.com/fleetmux/fleetmux/api"

// Kinds of fleet changes (WatchFleet).
const (
	ChangeSession  = "session"  // a session's event or block: created, state, a block started or finished, exited, closed
	ChangeApproval = "approval" // an approval asked for or decided
	ChangeAgent    = "agent"    // an agent's state
)

// WatchFleet calls fn for each change the nodes tell of on the bus, every node's
// (what a list of sessions, approvals or agents shows may have changed): its kind
// (ChangeSession, ChangeApproval, ChangeAgent), node, and session or agent id (""
// for an approval). It says only that something changed, never what: a reader
// asks the API, which checks what it may see. fn runs on the bus's goroutine and
// must not block. The subscriptions are shared with every other watcher.
func (c *Controller) WatchFleet(fn func(kind, node, id string)) (stop func(), err error) {
	subjects := map[string]string{
		c.subj.All(api.KindEvent, "*"):    ChangeSession,
		c.subj.All(api.KindBlock, "*"):    ChangeSession,
		c.subj.All(api.KindApproval, "*"): ChangeApproval,
		c.subj.All(api.KindAgent, "*"):    ChangeAgent,
	}
	var stops []func() error
	stopAll := func() {
		for _, s := range stops {
			_ = s()
		}
	}
	for subject, kind := range subjects {
		s, err := c.share.Subscribe(subject, func(subj string, _ map[string]string, _ []byte) {
			p, err := c.subj.Parse(subj)
			if err != nil {
				return
			}
			fn(kind, p.Node, p.Session)
		})
		if err != nil {
			stopAll()
			return nil, api.Errorf(api.CodeUnavailable, "cannot watch the fleet's changes")
		}
		stops = append(stops, s)
	}
	return stopAll, nil
}
