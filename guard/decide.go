package guard

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
// verified envelope, never from its body: the node passes it as a Writer.

// Approvals lists the approvals the guard knows, in the state asked for (all when
// empty), oldest first.
func (g *Guard) Approvals(state string) (api.ApprovalList, error) {
	if err := api.ValidApprovalState(state); err != nil {
		return api.ApprovalList{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	out := api.ApprovalList{Approvals: []api.Approval{}}
	g.appr.mu.Lock()
	defer g.appr.mu.Unlock()
	for _, ap := range g.appr.order {
		if state == "" || ap.a.State == state {
			out.Approvals = append(out.Approvals, ap.a)
		}
	}
	return out, nil
}

// lookupApproval finds an approval by id.
func (g *Guard) lookupApproval(id string) (*approval, error) {
	if err := api.ValidApprovalID(id); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	g.appr.mu.Lock()
	ap := g.appr.byID[id]
	g.appr.mu.Unlock()
	if ap == nil {
		return nil, api.Errorf(api.CodeNotFound, "no approval %s/%s (decided approvals are forgotten after %d more)", g.cfg.Node, id, keepDecided)
	}
	return ap, nil
}

// Approval returns one approval; with wait > 0 it first waits (within it) until
// the approval is done: decided, and for an approved request until it ran. A wait
// that times out returns the approval as it is then; one that ctx ends returns it
// with ctx's error.
func (g *Guard) Approval(ctx context.Context, id string, wait time.Duration) (api.Approval, error) {
	ap, err := g.lookupApproval(id)
	if err != nil {
		return api.Approval{}, err
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ap.done:
		case <-t.C:
		case <-ctx.Done():
			return g.snapshot(ap), ctx.Err()
		}
	}
	return g.snapshot(ap), nil
}

// Decide approves or denies a pending approval for by (the verified writer of the
// decide request). Deciding needs the admin role or one of the approvers the rule
// named; nobody approves what they asked for themselves, nor a line or input
// asked in a session where they ran something (a program of theirs may have
// typed it); the principal that asked may always deny it (withdraw).
func (g *Guard) Decide(by Writer, r api.DecideRequest) (api.Approval, error) {
	var state string
	switch r.Decision {
	case api.DecisionApprove:
		state = api.ApprovalApproved
	case api.DecisionDeny:
		state = api.ApprovalDenied
	default:
		return api.Approval{}, api.Errorf(api.CodeBadRequest, "decision %q: want %s or %s", r.Decision, api.DecisionApprove, api.DecisionDeny)
	}
	if len(r.Reason) > api.MaxReasonBytes {
		return api.Approval{}, api.Errorf(api.CodeTooLarge, "reason of %d bytes (limit %d)", len(r.Reason), api.MaxReasonBytes)
	}
	if err := api.ValidText("reason", r.Reason, false); err != nil {
		return api.Approval{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	ap, err := g.lookupApproval(r.ID)
	if err != nil {
		return api.Approval{}, err
	}
	a := g.snapshot(ap)
	who := by.Principal
	if who == "" {
		who = by.Actor
	}
	withdraw := state == api.ApprovalDenied && who != "" && who == a.Principal
	if !withdraw && by.Role != api.RoleAdmin && !slices.Contains(a.Approvers, by.Role) {
		need := "the admin role"
		if len(a.Approvers) > 0 {
			need += " or one of the roles rule " + quoteRule(a.Rule) + " names (" + strings.Join(a.Approvers, ", ") + ")"
		}
		return api.Approval{}, api.Errorf(api.CodeForbidden, "deciding approval %s needs %s; %s has %s", a.Addr(), need, who, by.Role)
	}
	if state == api.ApprovalApproved && who != "" && who == a.Principal {
		return api.Approval{}, api.Errorf(api.CodeForbidden, "%s asked for approval %s: someone else must approve it (you may deny it)", who, a.Addr())
	}
	if state == api.ApprovalApproved && slices.Contains(ap.planters, who) {
		return api.Approval{}, api.Errorf(api.CodeForbidden, "%s ran something in session %s/%s, which may have typed the line of approval %s itself: someone else must approve it (you may deny it)",
			who, a.Node, a.Session, a.Addr())
	}
	if !g.settle(ap, state, who, r.Reason) {
		a = g.snapshot(ap)
		return api.Approval{}, api.Errorf(api.CodeGone, "approval %s is no longer pending: %s", a.Addr(), decidedText(a))
	}
	return g.snapshot(ap), nil
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
// policy version), decided (who, why), expired, or an approved request done (its
// block and exit code, or the session it created).
func (g *Guard) auditApproval(typ string, a api.Approval) {
	rec := api.AuditRecord{Time: time.Now().UTC(), Node: g.cfg.Node, Session: a.Session, Action: "approval." + typ, Result: "ok"}
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
			rec.Result, rec.Error = api.CodeUnavailable, Truncate(a.Error, 512)
		}
	}
	rec.Detail = Truncate(detail, 1024)
	if !utf8.ValidString(rec.Detail) {
		rec.Detail = "(not UTF-8)"
	}
	rec.Decision, rec.Rule, rec.PolicyVersion = api.ActionApprove, a.Rule, a.PolicyVersion
	g.cfg.Audit.Audit(rec)
}
