package node

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// Guardrails at the node (DESIGN.md "Guardrails"): the node holds the policy in
// force, taken from its PolicySource (the FLEETMUX_POLICY bucket in production),
// and decides every command before it reaches a session, whatever door it came
// through: run and fan-out before anything is typed, input and keys text that ends
// a line (guard_input.go), and the lines an integrated shell asks about before it
// runs them (session.Config.Guard, which calls enforce for the session's last
// writer).

// PolicySource is where the node takes its policy from (cmd wires transport's
// reader of the FLEETMUX_POLICY bucket in). Implementations are safe for
// concurrent use.
type PolicySource interface {
	// Watch calls fn with the policy document in force and its revision (doc nil:
	// no policy is set), first the one held now, before Watch returns, then every
	// change until stop is called. ctx bounds only the wait for the first value:
	// Watch returns its error when ctx ends first. fn runs on one goroutine owned
	// by the watch, never twice at once, and must not block for long; it may see a
	// revision again (a watch started again after a lost connection). stop waits
	// until fn no longer runs.
	Watch(ctx context.Context, fn func(doc []byte, revision uint64)) (stop func(), err error)
}

// unreadablePolicy is what the node enforces when the first policy it is given
// cannot be parsed: everything is denied, naming this rule, until a readable
// version arrives (a node never falls back to allowing everything silently).
const unreadablePolicy = "policy-unreadable"

// unknownWriter is the rule that denies, while a policy is in force, a line the
// shell asks about that no writer this agent knows of typed (see decide): after an
// agent restart, whoever typed a pending line must type it again.
const unknownWriter = "writer-unknown"

// guard is the node's policy state; the policy in force itself is Node.pol (nil:
// none), read lock-free by policy() and stored only under mu (setPolicy).
type guard struct {
	mu  sync.Mutex // guards fns and serialises setPolicy, so every follower sees every version in order
	fns []func(*policy.Policy)
	// ready is closed once the first state is known (a policy, or none).
	ready     chan struct{}
	readyOnce sync.Once
}

// policy returns the policy in force; nil means none (everything is allowed). It
// never blocks.
func (n *Node) policy() *policy.Policy { return n.pol.Load() }

// onPolicy registers f to follow the policy in force: f is called at once with the
// current one (nil: none), then with every new version, in order, never twice at
// once. f must not block and must not call onPolicy.
func (n *Node) onPolicy(f func(*policy.Policy)) {
	n.guard.mu.Lock()
	defer n.guard.mu.Unlock()
	n.guard.fns = append(n.guard.fns, f)
	f(n.pol.Load())
}

// setPolicy puts p in force and tells the followers.
func (n *Node) setPolicy(p *policy.Policy) {
	n.guard.mu.Lock()
	defer n.guard.mu.Unlock()
	n.pol.Store(p)
	for _, f := range n.guard.fns {
		f(p)
	}
	n.guard.readyOnce.Do(func() { close(n.guard.ready) })
}

// applyPolicy is the PolicySource's callback: it parses a new version and puts it
// in force. A document that does not parse leaves the version in force as it is
// (or, before any was in force, denies everything), says so loudly in the log and
// in an audit record; a deleted one means no policy, which is logged too.
func (n *Node) applyPolicy(doc []byte, revision uint64) {
	cur, known := n.pol.Load(), n.policyKnown()
	if doc == nil {
		if known && cur == nil {
			return
		}
		if n.cfg.Exposed {
			n.log.Warn("NO POLICY in force on a node reachable beyond loopback: every command is allowed (fleetmux policy set FILE)", "revision", revision)
		} else {
			n.log.Info("no policy in force: every command is allowed (the policy is not set, or was removed)", "revision", revision)
		}
		n.auditPolicy(revision, nil)
		n.setPolicy(nil)
		return
	}
	if known && cur != nil && cur.Version == revision {
		return // seen again after a restarted watch
	}
	p, err := policy.Parse(doc)
	if err != nil {
		n.auditPolicy(revision, err)
		if known {
			n.log.Error("POLICY REFUSED: the stored policy does not parse on this node; the one in force stays",
				"revision", revision, "in_force", versionOf(cur), "err", err)
			return
		}
		n.log.Error("POLICY REFUSED: the stored policy does not parse on this node; every command is denied until a readable version is set",
			"revision", revision, "rule", unreadablePolicy, "err", err)
		n.setPolicy(denyAll(revision))
		return
	}
	p.Version = revision
	n.log.Info("policy in force", "version", revision, "rules", len(p.Rules), "redact", len(p.Redacts))
	n.auditPolicy(revision, nil)
	n.setPolicy(p)
}

// denyAll is the policy of a node whose first policy does not parse: one rule,
// unreadablePolicy, that denies everything.
func denyAll(revision uint64) *policy.Policy {
	p, err := policy.Parse([]byte("version: 1\nrules:\n  - {name: " + unreadablePolicy + ", action: deny}\n"))
	if err != nil {
		panic("node: the deny-all policy does not parse: " + err.Error())
	}
	p.Version = revision
	return p
}

// versionOf is p's version, "none" for no policy (for logs).
func versionOf(p *policy.Policy) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatUint(p.Version, 10)
}

// policyKnown reports whether the first policy state has been set.
func (n *Node) policyKnown() bool {
	select {
	case <-n.guard.ready:
		return true
	default:
		return false
	}
}

// policyWait is how long a request waits for the node's first policy state before
// it is refused (the node has just started and its policy source is not read yet).
const policyWait = 10 * time.Second

// policyLoaded waits until the node knows its policy (at most policyWait, or ctx).
// Until then nothing is decided: the request is refused as unavailable, never
// allowed unchecked.
func (n *Node) policyLoaded(ctx context.Context) error {
	select {
	case <-n.guard.ready:
		return nil
	default:
	}
	t := time.NewTimer(policyWait)
	defer t.Stop()
	select {
	case <-n.guard.ready:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	return api.Errorf(api.CodeUnavailable, "node %s has not loaded its policy yet: try again", n.cfg.Name)
}

// policyWatchTimeout bounds one attempt to read the policy source.
const policyWatchTimeout = 15 * time.Second

// watchPolicy follows the policy source until the node closes, starting the watch
// again when it fails. It is a goroutine of the node (n.wg).
func (n *Node) watchPolicy() {
	defer n.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		// Bounded, so a source that cannot be read (no JetStream, no permission)
		// is logged below instead of retried in silence.
		wctx, cancel := context.WithTimeout(n.ctx, policyWatchTimeout)
		stop, err := n.cfg.Policy.Watch(wctx, n.applyPolicy)
		cancel()
		if err == nil {
			<-n.ctx.Done()
			stop()
			return
		}
		if n.ctx.Err() != nil {
			return
		}
		n.log.Warn("policy source not readable: trying again", "err", err, "known", n.policyKnown())
		t := time.NewTimer(backoff)
		select {
		case <-n.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// writer is who types into a session: the verified principal, actor label and role
// of the request that typed (writerOf), or of the person holding the session.
type writer struct{ Principal, Actor, Role string }

// writerOf is the writer of a verified request.
func writerOf(req request) writer {
	return writer{Principal: req.principal, Actor: req.actor, Role: req.role}
}

// decisionKey carries a request's *decision slot in the ctx of its handler, so the
// request's audit record names the decision enforce made for it.
type decisionKey struct{}

// decision is what enforce decided for a request (its audit record carries it).
type decision struct {
	mu      sync.Mutex // guards the fields below
	made    bool
	action  string
	rule    string
	version uint64
}

func (d *decision) set(p policy.Decision) {
	d.mu.Lock()
	d.made, d.action, d.rule, d.version = true, p.Action, p.Rule, p.Version
	d.mu.Unlock()
}

// fill copies the decision into an audit record.
func (d *decision) fill(rec *api.AuditRecord) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.made {
		rec.Decision, rec.Rule, rec.PolicyVersion = d.action, d.rule, d.version
	}
}

// enforce decides whether w may have command run in e's session, under the policy
// in force: nil (allow), an *api.Error with CodeDenied naming the rule (deny), or
// for an approve decision what approve returns (it may block until a person
// decides or ctx ends). Every decision is audited with the policy version: in the
// record of the request whose ctx carries a decision slot (handle), otherwise in
// its own record (a line an integrated shell asked about). A node whose policy is
// not known yet refuses (unavailable).
func (n *Node) enforce(ctx context.Context, e *entry, w writer, command string) error {
	if err := n.policyLoaded(ctx); err != nil {
		return err
	}
	d := n.decide(e, w, command)
	err := n.verdict(ctx, e, w, command, d)
	if slot, ok := ctx.Value(decisionKey{}).(*decision); ok {
		slot.set(d)
	} else {
		n.auditLine(e, w, command, d, err)
	}
	return err
}

// guardRun decides a command that run is about to type: on nil, w is the session's
// writer and the line is expected (the shell's own check lets it pass without
// deciding or holding it again).
func (n *Node) guardRun(ctx context.Context, e *entry, w writer, command string) error {
	if err := n.enforce(ctx, e, w, command); err != nil {
		return err
	}
	if err := e.stillHolds(w); err != nil {
		return err // taken over while it was decided (an approval)
	}
	if e.shellAsks() {
		e.expectLine(command) // typed at the prompt: the shell will ask about it
	}
	return nil
}

// verdict turns a decision into enforce's result.
func (n *Node) verdict(ctx context.Context, e *entry, w writer, command string, d policy.Decision) error {
	switch d.Action {
	case api.ActionAllow:
		return nil
	case api.ActionApprove:
		return n.approve(ctx, e, w, command, d)
	case api.ActionDeny:
		return &api.Error{Code: api.CodeDenied, Rule: d.Rule,
			Message: "denied by rule " + quoteRule(d.Rule) + " of the policy (version " + strconv.FormatUint(d.Version, 10) + ") on node " + n.cfg.Name + ": nothing was typed"}
	}
	// Decide returns one of the three; anything else must not pass.
	return &api.Error{Code: api.CodeDenied, Rule: d.Rule, Message: "denied: unknown policy action " + quoteRule(d.Action)}
}

func quoteRule(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// auditLine audits a decision made outside a request (a line an integrated shell
// asked about before running it).
func (n *Node) auditLine(e *entry, w writer, command string, d policy.Decision, err error) {
	rec := api.AuditRecord{Time: time.Now().UTC(), Node: n.cfg.Name, Session: e.id, Actor: w.Actor, Principal: w.Principal, Role: w.Role,
		Action: auditTyped, Detail: truncate(n.redactText(command), 512), Result: "ok", Decision: d.Action, Rule: d.Rule, PolicyVersion: d.Version}
	if err != nil {
		rec.Result, rec.Error = api.CodeInternal, truncate(err.Error(), 512)
		if ae, ok := err.(*api.Error); ok {
			rec.Result, rec.Error = ae.Code, truncate(ae.Message, 512)
		}
	}
	n.audits.Add(func() []byte { return marshalRecord(rec) })
}

// Audit actions of records that are not a verb's.
const (
	auditTyped  = "typed"  // a line typed at an integrated shell's prompt, decided before it ran
	auditPolicy = "policy" // the node put a policy version in force, or refused one
)

// auditPolicy audits a new policy version put in force (err nil) or refused.
func (n *Node) auditPolicy(revision uint64, err error) {
	rec := api.AuditRecord{Time: time.Now().UTC(), Node: n.cfg.Name, Action: auditPolicy, Result: "ok", PolicyVersion: revision}
	if err != nil {
		rec.Result, rec.Error = api.CodeBadRequest, truncate(err.Error(), 512)
	}
	n.audits.Add(func() []byte { return marshalRecord(rec) })
}

// entryGuard is an entry's guardrail state.
type entryGuard struct {
	mu sync.Mutex // guards the fields below
	// expected are lines the node decided and is about to type (run): the shell's
	// check of exactly such a line consumes it and allows it without deciding again.
	expected []expectedLine
	// pending is input text typed since the last line end (guard_input.go).
	pending []byte
	// pendingBy is the writer who typed pending (zero while it is empty);
	// pendingMixed: another writer typed into it too. A line is the writer's whose
	// text it is: nobody completes a line someone else started (guardInput).
	pendingBy    writer
	pendingMixed bool
}

type expectedLine struct {
	line  string
	until time.Time
}

// expectFor is how long a pre-approved line waits for the shell's check; maxExpected
// bounds the lines waiting (oldest dropped).
const (
	expectFor   = 30 * time.Second
	maxExpected = 16
)

// expectLine marks command as decided: the node is about to type it, and the
// shell's own check of that line must not decide (or hold) it again.
func (e *entry) expectLine(command string) {
	e.guard.mu.Lock()
	defer e.guard.mu.Unlock()
	now := time.Now()
	keep := e.guard.expected[:0]
	for _, x := range e.guard.expected {
		if now.Before(x.until) {
			keep = append(keep, x)
		}
	}
	if len(keep) >= maxExpected {
		keep = keep[1:]
	}
	e.guard.expected = append(keep, expectedLine{line: normLine(command), until: now.Add(expectFor)})
}

// expected consumes a pre-approved line equal to line, reporting whether there was
// one (then the shell runs it without a new decision).
func (e *entry) expected(line string) bool {
	line = normLine(line)
	e.guard.mu.Lock()
	defer e.guard.mu.Unlock()
	now := time.Now()
	for i, x := range e.guard.expected {
		if x.line == line && now.Before(x.until) {
			e.guard.expected = append(e.guard.expected[:i], e.guard.expected[i+1:]...)
			return true
		}
	}
	return false
}

// normLine is a command line as compared by expected: without the line ends and
// blanks around it.
func normLine(s string) string { return strings.TrimSpace(s) }
