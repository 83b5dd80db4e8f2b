package guard

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// Guardrails at the node: the guard decides every command before it reaches a
// session, whatever door it came through: run and fan-out before anything is
// typed, input and keys text that ends a line (input.go), the lines an integrated
// shell asks about before it runs them, and the argv and environment of a new
// session (create.go). Check is the one entry the node's verbs call; on nil they
// act, on an error they answer it (deny, held, busy, unavailable).

// Writer is who types into a session: the verified principal, actor label and
// role of the request that typed, or of the person holding the session.
type Writer struct{ Principal, Actor, Role string }

// Wire is w as the API shows it.
func (w Writer) Wire(attach bool) *api.Writer {
	return &api.Writer{Principal: w.Principal, Actor: w.Actor, Role: w.Role, Attach: attach}
}

// Decision is what the guard decided for a request: its audit record carries it
// (Fill). The zero value is ready; it is safe for concurrent use.
type Decision struct {
	mu      sync.Mutex // guards the fields below
	made    bool
	action  string
	rule    string
	version uint64
}

func (d *Decision) set(p policy.Decision) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.made, d.action, d.rule, d.version = true, p.Action, p.Rule, p.Version
	d.mu.Unlock()
}

// Fill copies the decision into an audit record (nothing when none was made).
func (d *Decision) Fill(rec *api.AuditRecord) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.made {
		rec.Decision, rec.Rule, rec.PolicyVersion = d.action, d.rule, d.version
	}
}

// Kinds of Request (Request.Verb): the node verbs the guard decides, and Line.
const (
	VerbRun    = "run"
	VerbInput  = "input"
	VerbKeys   = "keys"
	VerbCreate = "create"
	// Line is a line an integrated shell asks about before it runs it: decided for
	// the writer whose input formed it (Session.LineWriter), held until a person
	// decides when the policy says approve.
	Line = "line"
)

// Request is what Check decides.
type Request struct {
	// Verb is the kind: VerbRun, VerbInput, VerbKeys, VerbCreate or Line.
	Verb string
	// Session is the session's guard state (nil for VerbCreate).
	Session *Session
	// Writer is who asks (for Line: ignored, the guard finds who typed the line).
	Writer Writer
	// Command is what runs: a run's command or the shell's line.
	Command string
	// Unaccepted (Line): Command is one the shell runs while no line is accepted
	// (an expansion, a completion), a piece of the line being typed; otherwise it
	// is a line the shell accepted.
	Unaccepted bool
	// Data is what input or keys type (keys as the bytes they send).
	Data []byte
	// AtPrompt: an integrated shell waits at its prompt (input, keys): it asks
	// about the line itself, so the guard only refuses a deny at once. (A run asks
	// Target.Integrated once it is decided.)
	AtPrompt bool
	// Held is what approving a held request types, or creates (VerbCreate). Nil
	// for Line: the shell's question waits for the decision.
	Held *Held
	// Create is the new session's request (VerbCreate).
	Create *api.CreateRequest
	// Decision, when set, receives the decision for the request's audit record;
	// nil: the decision is audited on its own record (a Line, as AuditTyped).
	Decision *Decision
}

// Check decides req under the policy in force: nil lets the node act; an
// *api.Error says why not: CodeDenied naming the rule, CodeHeld naming the
// approval (a request the policy holds for a person), CodeBusy (the writer lease,
// or a line another writer began), CodeUnavailable (the policy is not known yet).
// A Line blocks while its approval waits, until ctx ends. On nil for a run, the
// line is expected: the shell's own check lets it pass without deciding it again.
func (g *Guard) Check(ctx context.Context, req Request) error {
	switch req.Verb {
	case VerbRun:
		if err := g.enforce(ctx, req.Session, req.Writer, req.Command, req.Held, req.Decision); err != nil {
			return err
		}
		if err := req.Session.StillHolds(req.Writer); err != nil {
			return err // taken over while it was decided (an approval)
		}
		if req.Session.t.Integrated() {
			req.Session.ExpectLine(req.Command) // typed at the prompt: the shell will ask about it
		}
		return nil
	case VerbInput, VerbKeys:
		if err := req.Session.toolHeld(req.Data); err != nil {
			return err
		}
		return g.checkInput(ctx, req)
	case VerbCreate:
		return g.checkCreate(ctx, req)
	case Line:
		return g.checkLine(ctx, req)
	}
	return api.Errorf(api.CodeInternal, "guard: no check for %q", req.Verb)
}

// enforce decides whether w may have command run in s's session (s nil: a session
// being created, labels from held), under the policy in force: nil (allow), an
// *api.Error with CodeDenied naming the rule (deny), or for an approve decision
// what approve returns (it may block until a person decides or ctx ends). Every
// decision is audited with the policy version: in slot (the request's record),
// otherwise in its own record (a line an integrated shell asked about).
func (g *Guard) enforce(ctx context.Context, s *Session, w Writer, command string, held *Held, slot *Decision) error {
	if err := g.Loaded(ctx); err != nil {
		return err
	}
	d := g.decide(s, w, command, held)
	err := g.verdict(ctx, s, w, command, d, held)
	if err == nil && s != nil {
		s.notePlanter(w) // it runs (or is typed into a program) as w's
	}
	if slot != nil {
		slot.set(d)
	} else {
		g.auditLine(s, w, command, d, err)
	}
	return err
}

// decide is the policy's decision for w typing command into s's session.
func (g *Guard) decide(s *Session, w Writer, command string, held *Held) policy.Decision {
	return g.decideRequest(s, w, policy.Request{Command: command}, held)
}

// decideRequest is the policy's decision on req (its command, and an agent's
// tool) asked by w in s's session: it fills in who asks and where.
func (g *Guard) decideRequest(s *Session, w Writer, req policy.Request, held *Held) policy.Decision {
	p := g.Policy()
	if p == nil {
		return policy.Decision{Action: api.ActionAllow}
	}
	if w == (Writer{}) {
		// Nobody this agent knows of typed the line: a question the shell asks again
		// after an agent restart (the writer was the last agent's), a line typed
		// while no agent ran, input that did not come through the node, a line no
		// writer's bytes formed (injected). Which of the policy's rules on
		// principals, actors and roles would apply is not known: fail closed
		// (decided for no writer, an approve rule on an actor would not match and
		// the default would let it run).
		return policy.Decision{Action: api.ActionDeny, Rule: UnknownWriter, Version: p.Version}
	}
	var labels map[string]string
	switch {
	case s != nil:
		labels = s.t.Labels()
	case held != nil && held.Create != nil:
		labels = held.Create.Labels
	}
	req.Principal, req.Actor, req.Role = w.Principal, w.Actor, w.Role
	req.Node, req.NodeLabels, req.SessionLabels = g.cfg.Node, g.cfg.Labels, labels
	return p.Decide(req)
}

// verdict turns a decision into enforce's result.
func (g *Guard) verdict(ctx context.Context, s *Session, w Writer, command string, d policy.Decision, held *Held) error {
	switch d.Action {
	case api.ActionAllow:
		return nil
	case api.ActionApprove:
		return g.approve(ctx, s, w, command, d, held)
	case api.ActionDeny:
		return &api.Error{Code: api.CodeDenied, Rule: d.Rule,
			Message: "denied by rule " + quoteRule(d.Rule) + " of the policy (version " + strconv.FormatUint(d.Version, 10) + ") on node " + g.cfg.Node + ": nothing was typed"}
	}
	// Decide returns one of the three; anything else must not pass.
	return &api.Error{Code: api.CodeDenied, Rule: d.Rule, Message: "denied: unknown policy action " + quoteRule(d.Action)}
}

// auditLine audits a decision made outside a request (a line an integrated shell
// asked about before running it).
func (g *Guard) auditLine(s *Session, w Writer, command string, d policy.Decision, err error) {
	rec := api.AuditRecord{Time: time.Now().UTC(), Node: g.cfg.Node, Actor: w.Actor, Principal: w.Principal, Role: w.Role,
		Action: AuditTyped, Detail: Truncate(g.RedactText(command), 512), Result: "ok", Decision: d.Action, Rule: d.Rule, PolicyVersion: d.Version}
	if s != nil {
		rec.Session = s.t.ID()
	}
	if err != nil {
		rec.Result, rec.Error = api.CodeInternal, Truncate(err.Error(), 512)
		if ae, ok := err.(*api.Error); ok {
			rec.Result, rec.Error = ae.Code, Truncate(ae.Message, 512)
		}
	}
	g.cfg.Audit.Audit(rec)
}

// checkLine decides a line an integrated shell asks about: a line the node itself
// decided and typed (a run, an approved held run) passes without a second
// decision; any other is decided for the writer whose input formed it
// (LineWriter: no writer's, UnknownWriter), audited as AuditTyped, and held for a
// person when the policy says approve (the line waits unexecuted at the prompt).
func (g *Guard) checkLine(ctx context.Context, req Request) error {
	s := req.Session
	if s.expected(req.Command) || req.Unaccepted && s.expectedPiece(req.Command) {
		return nil
	}
	return g.enforce(ctx, s, s.LineWriter(req.Command, req.Unaccepted), req.Command, nil, nil)
}

// LineVerdict is what the shell is told about a line Check(Line) refused: the
// rule that decided and why, for the person or agent at the terminal (empty: the
// shell's own words).
func LineVerdict(ae *api.Error) (rule, message string) {
	switch {
	case ae.Code != api.CodeDenied || ae.Approval != "":
		return ae.Rule, ae.Message // an approval denied or expired, the policy not known yet, too many held
	case ae.Rule == UnknownWriter:
		return ae.Rule, "no writer this agent knows of typed the line (typed before the agent restarted, or by a program in the session): type it again"
	}
	return ae.Rule, ""
}
