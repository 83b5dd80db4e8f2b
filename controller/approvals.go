package controller

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Approvals (DESIGN.md "Guardrails"): the nodes hold the commands an approve rule
// matched; the controller lists them fleet-wide (the approvals verb of every node),
// reads one (waiting until it is done, for MCP's wait_for), passes decisions on
// (the decide verb: the node checks the decider's role and audits), and lets the
// front doors follow the approval events (<prefix>.approval.<node>).

// Approvals lists the approvals of one node (node, "" for every node) in state (""
// for every state), oldest first; nodes that do not answer in time are listed in
// Unavailable (when node is "", else its error is returned).
func (c *Controller) Approvals(ctx context.Context, node, state string) (api.ApprovalList, error) {
	if err := api.ValidApprovalState(state); err != nil {
		return api.ApprovalList{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	names := c.nodes.selectNodes(nil)
	if node != "" {
		if err := api.ValidName(node); err != nil {
			return api.ApprovalList{}, api.Errorf(api.CodeBadRequest, "node: %v", err)
		}
		names = []string{node}
	}
	who := principalOf(ctx)
	results := make([]api.ApprovalList, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() { // owned by this call: joined below
			defer wg.Done()
			errs[i] = c.call(ctx, who, n, "approvals", api.ApprovalsRequest{State: state}, &results[i], min(c.cfg.RequestTimeout, 2*time.Second))
		}()
	}
	wg.Wait()
	out := api.ApprovalList{Approvals: []api.Approval{}}
	for i, err := range errs {
		if err != nil {
			if node != "" {
				return api.ApprovalList{}, err
			}
			if ctx.Err() != nil {
				return api.ApprovalList{}, ctx.Err()
			}
			out.Unavailable = append(out.Unavailable, names[i])
			continue
		}
		out.Approvals = append(out.Approvals, results[i].Approvals...)
	}
	slices.SortStableFunc(out.Approvals, func(a, b api.Approval) int {
		if c := a.RequestedAt.Compare(b.RequestedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Addr(), b.Addr())
	})
	return out, nil
}

// Approval reads one approval. With waitMS > 0 it first waits, up to waitMS (at
// most api.MaxWait), until the approval is done: decided, and when approved and run
// by the node, until its block finished (Approval.Block, Approval.ExitCode).
func (c *Controller) Approval(ctx context.Context, node, id string, waitMS int) (api.Approval, error) {
	if err := checkApproval(node, id); err != nil {
		return api.Approval{}, err
	}
	waitMS = min(max(waitMS, 0), int(api.MaxWait/time.Millisecond))
	timeout := c.cfg.RequestTimeout
	if waitMS > 0 {
		timeout = c.timeoutFor(waitMS)
	}
	var a api.Approval
	err := c.call(ctx, principalOf(ctx), node, "approval", api.ApprovalRequest{ID: id, TimeoutMS: waitMS}, &a, timeout)
	return a, err
}

// Decide approves or denies a pending approval as the caller of ctx (the node
// checks the role: admin, or a role the approval's rule names).
func (c *Controller) Decide(ctx context.Context, node, id string, b api.DecideBody) (api.Approval, error) {
	if err := checkApproval(node, id); err != nil {
		return api.Approval{}, err
	}
	var a api.Approval
	err := c.call(ctx, principalOf(ctx), node, "decide", api.DecideRequest{ID: id, DecideBody: b}, &a, c.cfg.RequestTimeout)
	return a, err
}

func checkApproval(node, id string) error {
	if err := api.ValidName(node); err != nil {
		return api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	if err := api.ValidApprovalID(id); err != nil {
		return api.Errorf(api.CodeBadRequest, "%v", err)
	}
	return nil
}

// WatchApprovals calls fn with every approval event of node until stop is called
// (stop waits until fn no longer runs). fn runs on a goroutine of the watch, one
// event at a time, and must not block. An event on the approval subject is only a
// hint (a JetStream request's reply subject is the asker's choice, so more than
// the node can put a message there): each is checked against the approval the
// node itself reports (the approval verb), and fn gets that record, only when its
// state fits the event. Events that come faster than they are checked are dropped.
func (c *Controller) WatchApprovals(node string, fn func(api.ApprovalEvent)) (stop func() error, err error) {
	if err := api.ValidName(node); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	events := make(chan api.ApprovalEvent, maxApprovalChecks)
	stopSub, err := c.cfg.Bus.Subscribe(c.subj.Approval(node), func(_ string, _ map[string]string, data []byte) {
		var ev api.ApprovalEvent
		if json.Unmarshal(data, &ev) != nil || ev.Approval.Node != node || api.ValidApprovalID(ev.Approval.ID) != nil {
			return
		}
		select {
		case events <- ev:
		default: // checks are behind: drop it (approvals lists them all)
		}
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	who := principal{actor: "controller:" + c.cfg.Name, id: "controller:" + c.cfg.Name, role: api.RoleViewer}
	go func() { // owned by the watch: stop waits for it
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-events:
				var a api.Approval
				if c.call(ctx, who, node, api.VerbApproval, api.ApprovalRequest{ID: ev.Approval.ID}, &a, c.cfg.RequestTimeout) != nil ||
					a.Node != node || a.ID != ev.Approval.ID || !approvalEventFits(ev.Type, a) {
					continue
				}
				fn(api.ApprovalEvent{Type: ev.Type, Time: ev.Time, Approval: a})
			}
		}
	}()
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			err = stopSub()
			cancel()
			<-done
		})
		return err
	}, nil
}

// maxApprovalChecks bounds the approval events of one watch waiting to be checked.
const maxApprovalChecks = 16

// approvalEventFits reports whether an event of type typ can describe approval a as
// its node reports it now (a held approval may have been decided since: its held
// notice is then dropped, the decision's comes).
func approvalEventFits(typ string, a api.Approval) bool {
	switch typ {
	case api.ApprovalEventHeld:
		return a.State == api.ApprovalPending
	case api.ApprovalEventApproved, api.ApprovalEventDone:
		return a.State == api.ApprovalApproved
	case api.ApprovalEventDenied:
		return a.State == api.ApprovalDenied
	case api.ApprovalEventExpired:
		return a.State == api.ApprovalExpired
	}
	return false
}
