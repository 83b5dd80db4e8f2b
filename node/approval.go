package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/policy"
	"github.com/fleetmux/fleetmux/session"
)

// Approvals (DESIGN.md "Guardrails"): a command that an approve rule matched waits
// for a person. The node numbers it a<N> (the counter is kept in the data dir, so
// an id is never reused while it lives), publishes each change on
// <prefix>.approval.<node> and audits it, and:
//
//   - for a request (run, one target of a fan-out), answers held at once and keeps
//     the command: once approved the node types it itself, as the writer who
//     asked, marking it pre-approved (expectLine) so the shell's own check does
//     not hold it again, and records its block and exit code; denied or expired,
//     it is never typed;
//   - for an input or keys request into a program without shell integration,
//     answers held at once, nothing of it written; once approved the node writes
//     it exactly as it was asked (a line typed in pieces is not doubled);
//   - for a line an integrated shell asks about (session.Config.Guard: enforce
//     called without a request), blocks until a person decides or the session
//     closes, the line waiting unexecuted at the prompt, then allows or denies it.
//
// Undecided after the rule's approve_within means denied (expired). At most
// api.MaxPendingApprovals wait at once; decided approvals are kept in memory
// (keepDecided, oldest dropped) for the approvals verb and for waiters.

// keepDecided bounds the decided approvals a node remembers.
const keepDecided = 256

// approvals is the node's approval registry.
type approvals struct {
	mu      sync.Mutex // guards the fields below and every approval's a
	next    int        // the next id's number (persisted before use)
	byID    map[string]*approval
	order   []*approval // oldest first
	pending int
	wake    chan struct{} // tells the expirer that a deadline changed (buffered 1)
}

// approval is one held command. Its fields but a are set at creation and never
// change; a is guarded by approvals.mu.
type approval struct {
	a       api.Approval // its Command redacted (it leaves the node)
	command string       // the command as asked, which an approved run types
	replay  heldReq      // what approving it types
	e       *entry
	w       writer
	decided chan struct{} // closed when it is approved, denied or expired
	done    chan struct{} // closed when a.Done is set
}

func (n *Node) approvalCounterPath() string {
	return filepath.Join(n.cfg.DataDir, "next-approval-id")
}

// initApprovals prepares the registry (New).
func (n *Node) initApprovals() error {
	next, err := readCounter(n.approvalCounterPath())
	if err != nil {
		return fmt.Errorf("node: approval counter: %w", err)
	}
	n.appr = approvals{next: next, byID: map[string]*approval{}, wake: make(chan struct{}, 1)}
	return nil
}

// requestKey carries a request in the ctx of its handler (handle).
type requestKey struct{}

// requestOf is the request whose handler ctx is, if any: an approve decision for a
// request is answered held at once, and what the approval replays once approved
// comes from it; without one (a line an integrated shell holds at its prompt) the
// decision is waited for.
func requestOf(ctx context.Context) (request, bool) {
	req, ok := ctx.Value(requestKey{}).(request)
	return req, ok
}

// heldReq is what an approved request types: a run's command, or an input's or a
// keys request's exact input (text for a program without shell integration: the
// whole request was held, nothing of it written).
type heldReq struct {
	verb string   // "run", "input" or "keys"
	data string   // input
	keys []string // keys
}

// replayOf is what approving req types.
func replayOf(req request) heldReq {
	switch req.verb {
	case "input":
		var r api.InputRequest
		if json.Unmarshal(req.data, &r) == nil {
			return heldReq{verb: req.verb, data: r.Data}
		}
	case "keys":
		var r api.KeysRequest
		if json.Unmarshal(req.data, &r) == nil {
			return heldReq{verb: req.verb, keys: r.Keys}
		}
	}
	return heldReq{verb: "run"}
}

// approve holds command for a person's decision under the approve decision d (see
// the comment at the top of this file). For a request it returns a CodeHeld
// *api.Error naming the approval; for a shell's line it blocks until the decision
// (or ctx: the session closed) and returns nil (approved) or a CodeDenied error.
// With too many approvals pending it refuses (CodeLimit): nothing runs.
func (n *Node) approve(ctx context.Context, e *entry, w writer, command string, d policy.Decision) error {
	kind, rp := api.ApprovalLine, heldReq{}
	if req, ok := requestOf(ctx); ok {
		kind, rp = api.ApprovalRun, replayOf(req)
		if rp.verb != "run" {
			kind = api.ApprovalInput
		}
	}
	ap, held, err := n.hold(e, w, command, d, kind, rp)
	if err != nil {
		return err
	}
	addr := held.Addr()
	if kind != api.ApprovalLine {
		return &api.Error{Code: api.CodeHeld, Rule: d.Rule, Approval: addr,
			Message: fmt.Sprintf("rule %s holds this command for a person's approval: approval %s (undecided by %s means denied); nothing was typed yet, and once approved the node runs it in %s/%s",
				quoteRule(d.Rule), addr, held.ExpiresAt.Format(time.RFC3339), n.cfg.Name, e.id)}
	}
	select {
	case <-ap.decided:
	case <-ctx.Done():
		n.settle(ap, api.ApprovalExpired, "", "the shell stopped waiting for it (the line was abandoned, or the session closed)")
		return ctx.Err()
	}
	a := n.snapshot(ap)
	if a.State == api.ApprovalApproved {
		return nil
	}
	return &api.Error{Code: api.CodeDenied, Rule: d.Rule, Approval: addr, Message: deniedMessage(a)}
}

// deniedMessage says why a held command did not run.
func deniedMessage(a api.Approval) string {
	if a.State == api.ApprovalExpired {
		msg := "approval " + a.Addr() + " for rule " + quoteRule(a.Rule) + " expired undecided: denied"
		if a.Reason != "" {
			msg += " (" + a.Reason + ")"
		}
		return msg
	}
	msg := "approval " + a.Addr() + " for rule " + quoteRule(a.Rule) + " was denied by " + a.DecidedBy
	if a.Reason != "" {
		msg += ": " + a.Reason
	}
	return msg
}

// hold registers a pending approval and announces it; it returns the approval as
// it was registered (ap.a may change as soon as hold returns).
func (n *Node) hold(e *entry, w writer, command string, d policy.Decision, kind string, rp heldReq) (*approval, api.Approval, error) {
	now := time.Now().UTC()
	within := d.ApproveWithin
	if within <= 0 {
		within = policy.DefaultApproveWithin
	}
	n.appr.mu.Lock()
	if n.appr.pending >= api.MaxPendingApprovals {
		n.appr.mu.Unlock()
		return nil, api.Approval{}, api.Errorf(api.CodeLimit, "node %s already has %d approvals pending (limit %d): rule %s holds this command, which was not typed; decide some first",
			n.cfg.Name, n.appr.pending, api.MaxPendingApprovals, quoteRule(d.Rule))
	}
	num := n.appr.next
	if err := datadir.WriteFile(n.approvalCounterPath(), []byte(strconv.Itoa(num+1)+"\n"), 0o600); err != nil {
		n.appr.mu.Unlock()
		return nil, api.Approval{}, fmt.Errorf("approval counter: %w", err)
	}
	n.appr.next = num + 1
	ap := &approval{command: command, replay: rp, e: e, w: w, decided: make(chan struct{}), done: make(chan struct{})}
	ap.a = api.Approval{
		ID: "a" + strconv.Itoa(num), Node: n.cfg.Name, Session: e.id, Kind: kind, Command: n.redactText(command),
		Principal: w.Principal, Actor: w.Actor, Role: w.Role,
		Rule: d.Rule, PolicyVersion: d.Version, Approvers: slices.Clone(n.policy().Approvers(d.Rule)),
		State: api.ApprovalPending, RequestedAt: now, ExpiresAt: now.Add(within),
	}
	n.appr.byID[ap.a.ID] = ap
	n.appr.order = append(n.appr.order, ap)
	n.appr.pending++
	n.dropDecidedLocked()
	a := ap.a
	n.announce(api.ApprovalEventHeld, a) // under the lock: events keep the order of changes
	n.appr.mu.Unlock()
	n.wakeExpirer()
	n.log.Info("command held for approval", "session", e.id, "approval", a.ID, "rule", d.Rule, "principal", w.Principal)
	return ap, a, nil
}

// dropDecidedLocked forgets the oldest decided approvals beyond keepDecided.
func (n *Node) dropDecidedLocked() {
	decided := len(n.appr.order) - n.appr.pending
	if decided <= keepDecided {
		return
	}
	keep := n.appr.order[:0]
	for _, ap := range n.appr.order {
		if decided > keepDecided && ap.a.State != api.ApprovalPending && ap.a.Done {
			delete(n.appr.byID, ap.a.ID)
			decided--
			continue
		}
		keep = append(keep, ap)
	}
	clear(n.appr.order[len(keep):])
	n.appr.order = keep
}

// snapshot is a copy of ap's approval.
func (n *Node) snapshot(ap *approval) api.Approval {
	n.appr.mu.Lock()
	defer n.appr.mu.Unlock()
	return ap.a
}

// settle moves a pending approval to state (approved, denied, expired) for by with
// reason, announces and audits it, and starts an approved run. It reports false,
// changing nothing, when the approval was no longer pending.
func (n *Node) settle(ap *approval, state, by, reason string) bool {
	now := time.Now().UTC()
	n.appr.mu.Lock()
	if ap.a.State != api.ApprovalPending {
		n.appr.mu.Unlock()
		return false
	}
	ap.a.State, ap.a.DecidedAt, ap.a.DecidedBy, ap.a.Reason = state, &now, by, reason
	n.appr.pending--
	// Denied, expired and approved lines are done now; an approved run once its
	// block finished (runApproved).
	runs := state == api.ApprovalApproved && ap.a.Kind != api.ApprovalLine
	if !runs {
		ap.a.Done = true
	}
	a := ap.a
	close(ap.decided)
	if !runs {
		close(ap.done)
	}
	n.announce(state, a) // the event types of decisions are the states' words
	n.appr.mu.Unlock()
	n.log.Info("approval "+state, "session", a.Session, "approval", a.ID, "by", by)
	if runs && !n.goApproved(ap) {
		n.finish(ap, 0, nil, "the node is shutting down: it was not typed")
	}
	return true
}

// goApproved starts the run of an approved command, owned by the node (n.wg); false
// when the node is closing.
func (n *Node) goApproved(ap *approval) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.wg.Add(1)
	go n.runApproved(ap)
	return true
}

// runApproved types an approved command into its session as the writer who asked
// and waits for its block; the approval records the block and its exit code. A
// session busy with another command is waited for (up to api.MaxWait); one that
// closed ends it with an error.
func (n *Node) runApproved(ap *approval) {
	defer n.wg.Done()
	if ap.replay.verb == "input" || ap.replay.verb == "keys" {
		n.typeApproved(ap)
		return
	}
	e := ap.e
	ctx := e.ctx // cancelled when the session closes (and when the node does)
	opts := session.RunOptions{Timeout: api.MaxWait, MaxOutputBytes: 1}
	typeIt := func() (session.Result, error) {
		ran, err := e.awaitRun(ctx, ap.w) // the writer lease, as for any run
		if err != nil {
			return session.Result{}, err
		}
		// Typed at an integrated shell's prompt, the shell asks about it: it was
		// decided. Marked whatever the state now: the prompt may come back between
		// this check and Run (an unused mark lapses; it passes only this line).
		if e.s.Info().Integration == session.IntegrationOK {
			e.expectLine(ap.command)
		}
		res, err := e.s.Run(ctx, ap.command, opts)
		ran(res)
		return res, err
	}
	res, err := typeIt()
	if errors.Is(err, session.ErrBusy) {
		wctx, cancel := context.WithTimeout(ctx, api.MaxWait)
		_, err = e.s.Wait(wctx, session.UntilIdle, 0)
		cancel()
		if err == nil {
			res, err = typeIt()
		}
	}
	for err == nil && res.Block.State != session.BlockDone {
		res, err = e.s.WaitBlock(ctx, res.Block.N, opts)
	}
	if err != nil {
		n.finish(ap, res.Block.N, nil, "approved, but it could not run: "+err.Error())
		return
	}
	n.finish(ap, res.Block.N, res.Block.ExitCode, "")
}

// typeApproved writes an approved input or keys request as it was asked, as the
// writer who asked (waiting, up to api.MaxWait, while another writer holds the
// session's lease). No block is recorded: the program was not at a shell prompt.
func (n *Node) typeApproved(ap *approval) {
	e := ap.e
	var typed []byte
	if ap.replay.verb == "input" {
		typed = []byte(ap.replay.data)
	} else {
		typed = keyBytes(ap.replay.keys)
	}
	deadline := time.Now().Add(api.MaxWait)
	err := e.typed(ap.w, false)
	for errors.Is(err, &api.Error{Code: api.CodeBusy}) && time.Now().Before(deadline) {
		t := time.NewTimer(leaseRetry)
		select {
		case <-e.ctx.Done():
			t.Stop()
			n.finish(ap, 0, nil, "approved, but the session closed before it could be typed")
			return
		case <-t.C:
		}
		err = e.typed(ap.w, false)
	}
	if err == nil {
		if ap.replay.verb == "input" {
			err = e.s.Input(typed)
		} else {
			err = e.s.SendKeys(ap.replay.keys...)
		}
	}
	if err != nil {
		n.finish(ap, 0, nil, "approved, but it could not be typed: "+err.Error())
		return
	}
	e.typedInput(ap.w, typed)
	n.finish(ap, 0, nil, "")
}

// finish records the end of an approved run (its block, exit code, or why it did
// not run), marks the approval done and announces it.
func (n *Node) finish(ap *approval, block int, exit *int, why string) {
	n.appr.mu.Lock()
	if ap.a.Done {
		n.appr.mu.Unlock()
		return
	}
	ap.a.Block, ap.a.Error, ap.a.Done = block, why, true
	if exit != nil {
		v := *exit
		ap.a.ExitCode = &v
	}
	a := ap.a
	close(ap.done)
	n.announce(api.ApprovalEventDone, a)
	n.appr.mu.Unlock()
}

// announce publishes an approval event and audits it. Its callers hold
// n.appr.mu, so an approval's events go out in the order of its changes; neither
// the bus's Publish nor the audit queue blocks.
func (n *Node) announce(typ string, a api.Approval) {
	publishJSON(n.cfg.Bus, n.subj.Approval(n.cfg.Name), api.ApprovalEvent{Type: typ, Time: time.Now().UTC(), Approval: a})
	n.auditApproval(typ, a)
}

// wakeExpirer tells the expirer that a deadline was added.
func (n *Node) wakeExpirer() {
	select {
	case n.appr.wake <- struct{}{}:
	default:
	}
}

// expireApprovals expires pending approvals whose approve_within passed, until the
// node closes. It is a goroutine of the node (n.wg).
func (n *Node) expireApprovals() {
	defer n.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := n.expireDue(time.Now())
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), time.Millisecond)
		}
		t.Reset(wait)
		select {
		case <-n.ctx.Done():
			return
		case <-n.appr.wake:
		case <-t.C:
		}
	}
}

// expireDue expires the pending approvals due at now and returns the earliest
// deadline of those still pending (zero: none).
func (n *Node) expireDue(now time.Time) time.Time {
	var due []*approval
	var next time.Time
	n.appr.mu.Lock()
	for _, ap := range n.appr.order {
		if ap.a.State != api.ApprovalPending {
			continue
		}
		if !now.Before(ap.a.ExpiresAt) {
			due = append(due, ap)
		} else if next.IsZero() || ap.a.ExpiresAt.Before(next) {
			next = ap.a.ExpiresAt
		}
	}
	n.appr.mu.Unlock()
	for _, ap := range due {
		n.settle(ap, api.ApprovalExpired, "", "nobody decided within the rule's approve_within")
	}
	return next
}

// closeApprovals ends what waits on approvals when the node closes: pending ones
// expire (a shell waiting on one is closing anyway).
func (n *Node) closeApprovals() {
	n.appr.mu.Lock()
	var pending []*approval
	for _, ap := range n.appr.order {
		if ap.a.State == api.ApprovalPending {
			pending = append(pending, ap)
		}
	}
	n.appr.mu.Unlock()
	for _, ap := range pending {
		n.settle(ap, api.ApprovalExpired, "", "the node shut down")
	}
}
