package guard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/policy"
)

// Approvals (DESIGN.md "Guardrails"): a command that an approve rule matched waits
// for a person. The guard numbers it a<N> (the counter is kept in the data dir, so
// an id is never reused while it lives), publishes each change (Publisher) and
// audits it, and:
//
//   - for a request (run, one target of a fan-out), answers held at once and keeps
//     the command: once approved the node types it (Target.Replay), as the writer
//     who asked, marking it expected so the shell's own check does not hold it
//     again, and records its block and exit code; denied or expired, it is never
//     typed;
//   - for an input or keys request into a program without shell integration,
//     answers held at once, nothing of it written; once approved the node writes
//     it exactly as it was asked (a line typed in pieces is not doubled);
//   - for a create whose argv or environment an approve rule matched, answers held
//     at once and starts nothing; once approved the node creates the session as it
//     was asked (Creator), and the approval names it;
//   - for a line an integrated shell asks about (Line), blocks until a person
//     decides or the session closes, the line waiting unexecuted at the prompt,
//     then allows or denies it.
//
// Undecided after the rule's approve_within means denied (expired). At most
// api.MaxPendingApprovals wait at once; decided approvals are kept in memory
// (keepDecided, oldest dropped) for the approvals verb and for waiters.

// keepDecided bounds the decided approvals a guard remembers.
const keepDecided = 256

// Held is what approving a held request does: a run's command typed, an input's
// or a keys request's exact input written, or a session created.
type Held struct {
	Writer  Writer
	Verb    string             // VerbRun, VerbInput, VerbKeys or VerbCreate
	Command string             // VerbRun: the command
	Data    []byte             // VerbInput, VerbKeys: the bytes to write
	Keys    []string           // VerbKeys: the key names
	Create  *api.CreateRequest // VerbCreate: the request
}

// Creator creates a session an approval held (the node implements it): it returns
// the new session's id.
type Creator interface {
	CreateApproved(ctx context.Context, h Held) (session string, err error)
}

// approvals is the guard's approval registry.
type approvals struct {
	mu      sync.Mutex // guards the fields below and every approval's a
	next    int        // the next id's number (persisted before use)
	byID    map[string]*approval
	order   []*approval // oldest first
	pending int
	wake    chan struct{} // tells the expirer that a deadline changed (buffered 1)
	creator Creator
}

// approval is one held command. Its fields but a are set at creation and never
// change; a is guarded by approvals.mu.
type approval struct {
	a    api.Approval // its Command redacted (it leaves the node)
	held *Held        // what approving it does (nil: a shell's line)
	// planters may not approve it: who ran something in the session where a line
	// or input was asked (a program they started may have typed it).
	planters []string
	s        *Session      // nil for a create
	decided  chan struct{} // closed when it is approved, denied or expired
	done     chan struct{} // closed when a.Done is set
}

func (g *Guard) approvalCounterPath() string {
	return filepath.Join(g.cfg.DataDir, "next-approval-id")
}

// initApprovals prepares the registry (New).
func (g *Guard) initApprovals() error {
	next, err := readCounter(g.approvalCounterPath())
	if err != nil {
		return fmt.Errorf("guard: approval counter: %w", err)
	}
	g.appr = approvals{next: next, byID: map[string]*approval{}, wake: make(chan struct{}, 1)}
	return nil
}

// SetCreator sets who creates the sessions of approved creates (the node, once).
func (g *Guard) SetCreator(c Creator) {
	g.appr.mu.Lock()
	g.appr.creator = c
	g.appr.mu.Unlock()
}

// readCounter reads a persisted counter (1 when absent).
func readCounter(path string) (int, error) {
	b, err := datadir.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("counter %s is corrupt: %q", path, b)
	}
	return v, nil
}

// approve holds command for a person's decision under the approve decision d (see
// the comment at the top of this file). For a request (held set) it returns a
// CodeHeld *api.Error naming the approval; for a shell's line it blocks until the
// decision (or ctx: the session closed) and returns nil (approved) or a CodeDenied
// error. With too many approvals pending it refuses (CodeLimit): nothing runs.
func (g *Guard) approve(ctx context.Context, s *Session, w Writer, command string, d policy.Decision, held *Held) error {
	kind := api.ApprovalLine
	if held != nil {
		kind = api.ApprovalRun
		switch held.Verb {
		case VerbInput, VerbKeys:
			kind = api.ApprovalInput
		case VerbCreate:
			kind = api.ApprovalCreate
		}
	}
	ap, a, err := g.hold(s, w, command, d, kind, held, nil)
	if err != nil {
		return err
	}
	addr := a.Addr()
	if held != nil {
		where := "once approved the node runs it in " + g.cfg.Node + "/" + a.Session
		if held.Verb == VerbCreate {
			where = "no session was started: once approved the node creates it as asked, and the approval names it"
		}
		return &api.Error{Code: api.CodeHeld, Rule: d.Rule, Approval: addr,
			Message: fmt.Sprintf("rule %s holds this command for a person's approval: approval %s (undecided by %s means denied); nothing was typed yet, and %s",
				quoteRule(d.Rule), addr, a.ExpiresAt.Format(time.RFC3339), where)}
	}
	select {
	case <-ap.decided:
	case <-ctx.Done():
		g.settle(ap, api.ApprovalExpired, "", "the shell stopped waiting for it (the line was abandoned, or the session closed)")
		return ctx.Err()
	}
	a = g.snapshot(ap)
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
func (g *Guard) hold(s *Session, w Writer, command string, d policy.Decision, kind string, held *Held, tool *ToolUse) (*approval, api.Approval, error) {
	now := time.Now().UTC()
	within := d.ApproveWithin
	if within <= 0 {
		within = policy.DefaultApproveWithin
	}
	g.appr.mu.Lock()
	if g.appr.pending >= api.MaxPendingApprovals {
		g.appr.mu.Unlock()
		return nil, api.Approval{}, api.Errorf(api.CodeLimit, "node %s already has %d approvals pending (limit %d): rule %s holds this command, which was not typed; decide some first",
			g.cfg.Node, g.appr.pending, api.MaxPendingApprovals, quoteRule(d.Rule))
	}
	num := g.appr.next
	if err := datadir.WriteFile(g.approvalCounterPath(), []byte(strconv.Itoa(num+1)+"\n"), 0o600); err != nil {
		g.appr.mu.Unlock()
		return nil, api.Approval{}, fmt.Errorf("approval counter: %w", err)
	}
	g.appr.next = num + 1
	ap := &approval{held: held, s: s, decided: make(chan struct{}), done: make(chan struct{})}
	var id string
	if s != nil {
		id = s.t.ID()
		if kind == api.ApprovalLine || kind == api.ApprovalInput || kind == api.ApprovalAgentTool {
			ap.planters = s.plantersBut(w.Principal)
		}
	}
	ap.a = api.Approval{
		ID: "a" + strconv.Itoa(num), Node: g.cfg.Node, Session: id, Kind: kind, Command: g.RedactText(command),
		Principal: w.Principal, Actor: w.Actor, Role: w.Role,
		Rule: d.Rule, PolicyVersion: d.Version, Approvers: slices.Clone(g.Policy().Approvers(d.Rule)),
		State: api.ApprovalPending, RequestedAt: now, ExpiresAt: now.Add(within),
	}
	if tool != nil {
		ap.a.Agent, ap.a.Tool = tool.Agent, tool.Tool
		if s != nil {
			s.holdTool(ap.a.Addr()) // before anyone can see it: no input meanwhile
		}
	}
	g.appr.byID[ap.a.ID] = ap
	g.appr.order = append(g.appr.order, ap)
	g.appr.pending++
	g.dropDecidedLocked()
	a := ap.a
	g.announce(api.ApprovalEventHeld, a) // under the lock: events keep the order of changes
	g.appr.mu.Unlock()
	g.wakeExpirer()
	g.log.Info("command held for approval", "session", id, "approval", a.ID, "rule", d.Rule, "principal", w.Principal)
	return ap, a, nil
}

// dropDecidedLocked forgets the oldest decided approvals beyond keepDecided.
func (g *Guard) dropDecidedLocked() {
	decided := len(g.appr.order) - g.appr.pending
	if decided <= keepDecided {
		return
	}
	keep := g.appr.order[:0]
	for _, ap := range g.appr.order {
		if decided > keepDecided && ap.a.State != api.ApprovalPending && ap.a.Done {
			delete(g.appr.byID, ap.a.ID)
			decided--
			continue
		}
		keep = append(keep, ap)
	}
	clear(g.appr.order[len(keep):])
	g.appr.order = keep
}

// snapshot is a copy of ap's approval.
func (g *Guard) snapshot(ap *approval) api.Approval {
	g.appr.mu.Lock()
	defer g.appr.mu.Unlock()
	return ap.a
}

// settle moves a pending approval to state (approved, denied, expired) for by with
// reason, announces and audits it, and starts an approved request. It reports
// false, changing nothing, when the approval was no longer pending.
func (g *Guard) settle(ap *approval, state, by, reason string) bool {
	now := time.Now().UTC()
	g.appr.mu.Lock()
	if ap.a.State != api.ApprovalPending {
		g.appr.mu.Unlock()
		return false
	}
	ap.a.State, ap.a.DecidedAt, ap.a.DecidedBy, ap.a.Reason = state, &now, by, reason
	g.appr.pending--
	// Denied, expired and approved lines are done now; an approved request once
	// it ran (runApproved).
	runs := state == api.ApprovalApproved && ap.held != nil
	if !runs {
		ap.a.Done = true
	}
	a := ap.a
	close(ap.decided)
	if !runs {
		close(ap.done)
	}
	g.announce(state, a) // the event types of decisions are the states' words
	g.appr.mu.Unlock()
	g.log.Info("approval "+state, "session", a.Session, "approval", a.ID, "by", by)
	if runs && !g.goApproved(ap) {
		g.finish(ap, "", 0, nil, "the node is shutting down: it was not typed")
	}
	return true
}

// goApproved starts what an approval approved, owned by the guard (g.wg); false
// when the guard is closing.
func (g *Guard) goApproved(ap *approval) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go g.runApproved(ap)
	return true
}

// runApproved has the node do what an approval approved: type it into its session
// as the writer who asked (Target.Replay), or create the session (Creator); the
// approval records the block and its exit code, or the new session.
func (g *Guard) runApproved(ap *approval) {
	defer g.wg.Done()
	h := *ap.held
	if h.Verb == VerbCreate {
		g.appr.mu.Lock()
		c := g.appr.creator
		g.appr.mu.Unlock()
		if c == nil {
			g.finish(ap, "", 0, nil, "approved, but this node creates no held sessions")
			return
		}
		id, err := c.CreateApproved(g.ctx, h)
		if err != nil {
			g.finish(ap, "", 0, nil, "approved, but the session could not be created: "+err.Error())
			return
		}
		g.finish(ap, id, 0, nil, "")
		return
	}
	block, exit, err := ap.s.t.Replay(g.ctx, h)
	ap.s.notePlanter(h.Writer)
	if err != nil {
		what := "run"
		if h.Verb != VerbRun {
			what = "be typed"
		}
		g.finish(ap, "", block, nil, "approved, but it could not "+what+": "+err.Error())
		return
	}
	g.finish(ap, "", block, exit, "")
}

// finish records the end of an approved request (its block, exit code, the
// session it created, or why it did not run), marks the approval done and
// announces it.
func (g *Guard) finish(ap *approval, session string, block int, exit *int, why string) {
	g.appr.mu.Lock()
	if ap.a.Done {
		g.appr.mu.Unlock()
		return
	}
	ap.a.Block, ap.a.Error, ap.a.Done = block, why, true
	if session != "" {
		ap.a.Session = session
	}
	if exit != nil {
		v := *exit
		ap.a.ExitCode = &v
	}
	a := ap.a
	close(ap.done)
	g.announce(api.ApprovalEventDone, a)
	g.appr.mu.Unlock()
}

// announce publishes an approval event and audits it. Its callers hold
// g.appr.mu, so an approval's events go out in the order of its changes; neither
// Publisher nor Auditor blocks.
func (g *Guard) announce(typ string, a api.Approval) {
	g.cfg.Events.PublishApproval(api.ApprovalEvent{Type: typ, Time: time.Now().UTC(), Approval: a})
	g.auditApproval(typ, a)
}

// wakeExpirer tells the expirer that a deadline was added.
func (g *Guard) wakeExpirer() {
	select {
	case g.appr.wake <- struct{}{}:
	default:
	}
}

// expireApprovals expires pending approvals whose approve_within passed, until the
// guard closes. It is a goroutine of the guard (g.wg).
func (g *Guard) expireApprovals() {
	defer g.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := g.expireDue(time.Now())
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), time.Millisecond)
		}
		t.Reset(wait)
		select {
		case <-g.ctx.Done():
			return
		case <-g.appr.wake:
		case <-t.C:
		}
	}
}

// expireDue expires the pending approvals due at now and returns the earliest
// deadline of those still pending (zero: none).
func (g *Guard) expireDue(now time.Time) time.Time {
	var due []*approval
	var next time.Time
	g.appr.mu.Lock()
	for _, ap := range g.appr.order {
		if ap.a.State != api.ApprovalPending {
			continue
		}
		if !now.Before(ap.a.ExpiresAt) {
			due = append(due, ap)
		} else if next.IsZero() || ap.a.ExpiresAt.Before(next) {
			next = ap.a.ExpiresAt
		}
	}
	g.appr.mu.Unlock()
	for _, ap := range due {
		g.settle(ap, api.ApprovalExpired, "", "nobody decided within the rule's approve_within")
	}
	return next
}

// closeApprovals ends what waits on approvals when the guard closes: pending ones
// expire.
func (g *Guard) closeApprovals() {
	g.appr.mu.Lock()
	var pending []*approval
	for _, ap := range g.appr.order {
		if ap.a.State == api.ApprovalPending {
			pending = append(pending, ap)
		}
	}
	g.appr.mu.Unlock()
	for _, ap := range pending {
		g.settle(ap, api.ApprovalExpired, "", "the node shut down")
	}
}
