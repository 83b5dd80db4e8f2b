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
// (stop waits until fn no longer runs). fn runs on the bus's delivery goroutine
// and must not block. Only node may publish on its approval subject (its NATS
// permissions), so an event names what that node did.
func (c *Controller) WatchApprovals(node string, fn func(api.ApprovalEvent)) (stop func() error, err error) {
	if err := api.ValidName(node); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	return c.cfg.Bus.Subscribe(c.subj.Approval(node), func(_ string, _ map[string]string, data []byte) {
		var ev api.ApprovalEvent
		if json.Unmarshal(data, &ev) != nil || ev.Approval.Node != node {
			return
		}
		fn(ev)
	})
}
