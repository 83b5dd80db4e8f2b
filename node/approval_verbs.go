package node

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
)

// The approval verbs: approvals (list), approval (one, optionally waiting until it
// is done) and decide (approve or deny). Who decides comes from the request's
// verified envelope, never from its body.

func (n *Node) listApprovals(ctx context.Context, req request) (any, error) {
	var r api.ApprovalsRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	if err := api.ValidApprovalState(r.State); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	out := api.ApprovalList{Approvals: []api.Approval{}}
	n.appr.mu.Lock()
	defer n.appr.mu.Unlock()
	for _, ap := range n.appr.order {
		if r.State == "" || ap.a.State == r.State {
			out.Approvals = append(out.Approvals, ap.a)
		}
	}
	return out, nil
}

// lookupApproval finds an approval by id.
func (n *Node) lookupApproval(id string) (*approval, error) {
	if err := api.ValidApprovalID(id); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	n.appr.mu.Lock()
	ap := n.appr.byID[id]
	n.appr.mu.Unlock()
	if ap == nil {
		return nil, api.Errorf(api.CodeNotFound, "no approval %s/%s (decided approvals are forgotten after %d more)", n.cfg.Name, id, keepDecided)
	}
	return ap, nil
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
	ap, err := n.lookupApproval(r.ID)
	if err != nil {
		return nil, err
	}
	if r.TimeoutMS > 0 {
		t := time.NewTimer(waitTimeout(r.TimeoutMS))
		defer t.Stop()
		select {
		case <-ap.done:
		case <-t.C:
		case <-ctx.Done():
			return nil, sessionErr(n.snapshot(ap).Session, ctx.Err())
		}
	}
	return n.snapshot(ap), nil
}

// decideApproval (verb decide) approves or denies a pending approval. Deciding
// needs the admin role or one of the approvers the rule named; nobody approves what
// they asked for themselves, and the principal that asked may always deny it
// (withdraw).
func (n *Node) decideApproval(ctx context.Context, req request) (any, error) {
	var r api.DecideRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	var state string
	switch r.Decision {
	case api.DecisionApprove:
		state = api.ApprovalApproved
	case api.DecisionDeny:
		state = api.ApprovalDenied
	default:
		return nil, api.Errorf(api.CodeBadRequest, "decision %q: want %s or %s", r.Decision, api.DecisionApprove, api.DecisionDeny)
	}
	if len(r.Reason) > api.MaxReasonBytes {
		return nil, api.Errorf(api.CodeTooLarge, "reason of %d bytes (limit %d)", len(r.Reason), api.MaxReasonBytes)
	}
	if err := api.ValidText("reason", r.Reason, false); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	ap, err := n.lookupApproval(r.ID)
	if err != nil {
		return nil, err
	}
	a := n.snapshot(ap)
	who := req.principal
	if who == "" {
		who = req.actor
	}
	withdraw := state == api.ApprovalDenied && who != "" && who == a.Principal
	if !withdraw && req.role != api.RoleAdmin && !slices.Contains(a.Approvers, req.role) {
		need := "the admin role"
		if len(a.Approvers) > 0 {
			need += " or one of the roles rule " + quoteRule(a.Rule) + " names (" + strings.Join(a.Approvers, ", ") + ")"
		}
		return nil, api.Errorf(api.CodeForbidden, "deciding approval %s needs %s; %s has %s", a.Addr(), need, who, req.role)
	}
	if state == api.ApprovalApproved && who != "" && who == a.Principal {
		return nil, api.Errorf(api.CodeForbidden, "%s asked for approval %s: someone else must approve it (you may deny it)", who, a.Addr())
	}
	if !n.settle(ap, state, who, r.Reason) {
		a = n.snapshot(ap)
		return nil, api.Errorf(api.CodeGone, "approval %s is no longer pending: %s", a.Addr(), decidedText(a))
	}
	return n.snapshot(ap), nil
}

// decidedText says how a decided approval was decided.
func decidedText(a api.Approval) string {
	s := a.State
	if a.DecidedBy != "" {
		s += " by " + a.DecidedBy
	}
	if a.DecidedAt != nil {
		s += " at " + a.DecidedAt.Format(time.RFC3339)
	}
	return s
}

// auditApproval audits a change of an approval: held (who asked, the rule, the
// policy version), decided (who, why), expired, or an approved run done (its block
// and exit code).
func (n *Node) auditApproval(typ string, a api.Approval) {
	rec := api.AuditRecord{Time: time.Now().UTC(), Node: n.cfg.Name, Session: a.Session, Action: "approval." + typ, Result: "ok"}
	detail := a.ID + " rule " + quoteRule(a.Rule) + " policy version " + strconv.FormatUint(a.PolicyVersion, 10) + ": " + a.Command
	switch typ {
	case api.ApprovalEventHeld:
		rec.Actor, rec.Principal, rec.Role = a.Actor, a.Principal, a.Role
	case api.ApprovalEventApproved, api.ApprovalEventDenied:
		rec.Principal = a.DecidedBy
		detail = a.ID + " " + typ + " by " + a.DecidedBy + " (reason: " + quoteRule(a.Reason) + "), rule " + quoteRule(a.Rule) +
			" policy version " + strconv.FormatUint(a.PolicyVersion, 10) + ", asked by " + a.Principal + ": " + a.Command
	case api.ApprovalEventExpired:
		detail = a.ID + " expired (" + a.Reason + "), rule " + quoteRule(a.Rule) + ": " + a.Command
	case api.ApprovalEventDone:
		detail = a.ID + " ran as block " + strconv.Itoa(a.Block)
		if a.ExitCode != nil {
			detail += ", exit code " + strconv.Itoa(*a.ExitCode)
		}
		if a.Error != "" {
			rec.Result, rec.Error = api.CodeUnavailable, truncate(a.Error, 512)
		}
	}
	rec.Detail = truncate(detail, 1024)
	if !utf8.ValidString(rec.Detail) {
		rec.Detail = "(not UTF-8)"
	}
	rec.Decision, rec.Rule, rec.PolicyVersion = api.ActionApprove, a.Rule, a.PolicyVersion
	n.audits.Add(func() []byte { return marshalRecord(rec) })
}
