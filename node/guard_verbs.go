package node

import (
	"context"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// The guard's verbs: approvals, approval, decide, take_over and the secrets. Each
// decodes its request and asks the guard; who asks comes from the request's
// verified envelope, never from its body.

func (n *Node) listApprovals(ctx context.Context, req request) (any, error) {
	var r api.ApprovalsRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	return n.guard.Approvals(r.State)
}

// getApproval returns one approval; with timeout_ms it first waits (within it)
// until the approval is done: decided, and for an approved run until its block
// finished. A wait that times out returns the approval as it is then.
func (n *Node) getApproval(ctx context.Context, req request) (any, error) {
	var r api.ApprovalRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	if r.TimeoutMS < 0 {
		return nil, api.Errorf(api.CodeBadRequest, "timeout_ms must not be negative")
	}
	var wait time.Duration
	if r.TimeoutMS > 0 {
		wait = waitTimeout(r.TimeoutMS)
	}
	a, err := n.guard.Approval(ctx, r.ID, wait)
	if err != nil && ctx.Err() != nil {
		return nil, sessionErr(a.Session, err)
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// decideApproval (verb decide) approves or denies a pending approval (the guard
// says who may).
func (n *Node) decideApproval(ctx context.Context, req request) (any, error) {
	var r api.DecideRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	return n.guard.Decide(writerOf(req), r)
}

// takeOverVerb serves take_over: the caller gets the session's writer lease, and
// the writer that held it is told by an EventTakenOver on the session's event
// subject (an SSH attach shows it to the person).
func (n *Node) takeOverVerb(ctx context.Context, req request) (any, error) {
	var r api.TakeOverRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	w := writerOf(req)
	prev, err := e.guard.TakeOver(w)
	if err != nil {
		return nil, err
	}
	if prev != nil {
		publishJSON(n.cfg.Bus, n.subj.Event(n.cfg.Name, e.id), api.SessionEvent{
			Type: api.EventTakenOver, Node: n.cfg.Name, Session: e.id, Time: time.Now().UTC(),
			State: e.info().State, Holder: w.Wire(false), Previous: prev,
		})
		n.log.Info("writer lease taken over", "session", e.id, "principal", w.Principal, "previous", prev.Principal)
	}
	return api.TakeOver{Session: e.info(), Previous: prev}, nil
}

func (n *Node) secretSet(ctx context.Context, req request) (any, error) {
	var r api.SecretSetRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	return n.guard.SetSecret(r, req.principal)
}

func (n *Node) secretList(ctx context.Context, req request) (any, error) {
	return n.guard.ListSecrets()
}

func (n *Node) secretRemove(ctx context.Context, req request) (any, error) {
	var r api.SecretRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	return n.guard.RemoveSecret(r.Name)
}
