// Package guard is everything the node decides before it acts (DESIGN.md
// "Guardrails"): the policy in force and its decisions, the writer lease, who
// typed a line, approvals, the secrets typed at password prompts and the redaction
// settings. The node's verbs call Check before they touch a session and act on
// its answer; the guard reaches the node only through the small interfaces below
// (Auditor, Publisher, Target, Prompt), and never touches a PTY itself.
package guard

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

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

// Auditor takes the guard's audit records (the node publishes them). Audit must
// not block.
type Auditor interface {
	Audit(rec api.AuditRecord)
}

// Publisher announces approval events (on <prefix>.approval.<node>). It must not
// block; a failure is the subscribers' gap.
type Publisher interface {
	PublishApproval(ev api.ApprovalEvent)
}

// Config configures a Guard. Node, DataDir, Audit and Events are required.
type Config struct {
	// Node is the node's name; Labels its labels (matched by node_labels).
	Node   string
	Labels map[string]string
	// DataDir holds the approval counter and the secrets (DataDir/secrets).
	DataDir string
	// Source is where the policy comes from; nil: no policy ever (everything is
	// allowed, known at once).
	Source PolicySource
	// Exposed says the node listens beyond loopback: no policy is then a warning.
	Exposed bool
	// WriterLease is how long typing holds a session's writer lease (default
	// api.WriterLease).
	WriterLease time.Duration
	Logger      *slog.Logger
	Audit       Auditor
	Events      Publisher
}

// unreadablePolicy is what the guard enforces when the first policy it is given
// cannot be parsed: everything is denied, naming this rule, until a readable
// version arrives (a node never falls back to allowing everything silently).
const unreadablePolicy = "policy-unreadable"

// UnknownWriter is the rule that denies, while a policy is in force, a line the
// shell asks about that no writer this agent knows of typed (see decide).
const UnknownWriter = "writer-unknown"

// Guard is one node's guardrails. Its methods are safe for concurrent use.
type Guard struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // ended by Close: the guard's goroutines stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// pol is the policy in force (nil: none), read lock-free by Policy and stored
	// only under mu (setPolicy).
	pol atomic.Pointer[policy.Policy]

	mu      sync.Mutex // guards fns, started and closed; serialises setPolicy, so every follower sees every version in order
	fns     []func(*policy.Policy)
	started bool
	closed  bool
	// ready is closed once the first state is known (a policy, or none).
	ready     chan struct{}
	readyOnce sync.Once

	appr    approvals  // held commands (approval.go)
	secrets secretLits // the stored secrets as literal redact patterns (secret.go)
	redact  redactFollowers
}

// New prepares a guard; Start begins its goroutines, Close ends them.
func New(cfg Config) (*Guard, error) {
	if cfg.Node == "" || cfg.DataDir == "" || cfg.Audit == nil || cfg.Events == nil {
		return nil, errors.New("guard: config needs a node name, a data dir, an auditor and a publisher")
	}
	if cfg.WriterLease <= 0 {
		cfg.WriterLease = api.WriterLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Guard{cfg: cfg, log: cfg.Logger, ready: make(chan struct{})}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	if cfg.Source == nil {
		close(g.ready) // no source: no policy, known at once
	}
	if err := g.initApprovals(); err != nil {
		return nil, err
	}
	g.SecretsChanged() // secrets stored before a restart are redacted too
	return g, nil
}

// Start begins following the policy source and expiring approvals.
func (g *Guard) Start() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started || g.closed {
		return
	}
	g.started = true
	g.wg.Add(1)
	go g.expireApprovals()
	if g.cfg.Source != nil {
		g.wg.Add(1)
		go g.watchPolicy()
	}
}

// Close expires the pending approvals (a shell waiting on one is closing anyway),
// stops the guard's goroutines and waits for them, an approved command being typed
// among them (its Target's Replay sees its ctx end). Idempotent.
func (g *Guard) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.closeApprovals()
	g.cancel()
	g.wg.Wait()
}

// Policy returns the policy in force; nil means none (everything is allowed). It
// never blocks.
func (g *Guard) Policy() *policy.Policy { return g.pol.Load() }

// OnPolicy registers f to follow the policy in force: f is called at once with
// the current one (nil: none), then with every new version, in order, never twice
// at once. f must not block and must not call OnPolicy.
func (g *Guard) OnPolicy(f func(*policy.Policy)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fns = append(g.fns, f)
	f(g.pol.Load())
}

// SetPolicy puts p in force and tells the followers (tests; a node takes its
// policy from its source).
func (g *Guard) SetPolicy(p *policy.Policy) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pol.Store(p)
	for _, f := range g.fns {
		f(p)
	}
	g.readyOnce.Do(func() { close(g.ready) })
}

// applyPolicy is the PolicySource's callback: it parses a new version and puts it
// in force. A document that does not parse leaves the version in force as it is
// (or, before any was in force, denies everything), says so loudly in the log and
// in an audit record; a deleted one means no policy, which is logged too.
func (g *Guard) applyPolicy(doc []byte, revision uint64) {
	cur, known := g.pol.Load(), g.policyKnown()
	if doc == nil {
		if known && cur == nil {
			return
		}
		if g.cfg.Exposed {
			g.log.Warn("NO POLICY in force on a node reachable beyond loopback: every command is allowed (fleetmux policy set FILE)", "revision", revision)
		} else {
			g.log.Info("no policy in force: every command is allowed (the policy is not set, or was removed)", "revision", revision)
		}
		g.auditPolicy(revision, nil)
		g.SetPolicy(nil)
		return
	}
	if known && cur != nil && cur.Version == revision {
		return // seen again after a restarted watch
	}
	p, err := policy.Parse(doc)
	if err != nil {
		g.auditPolicy(revision, err)
		if known {
			g.log.Error("POLICY REFUSED: the stored policy does not parse on this node; the one in force stays",
				"revision", revision, "in_force", versionOf(cur), "err", err)
			return
		}
		g.log.Error("POLICY REFUSED: the stored policy does not parse on this node; every command is denied until a readable version is set",
			"revision", revision, "rule", unreadablePolicy, "err", err)
		g.SetPolicy(denyAll(revision))
		return
	}
	p.Version = revision
	g.log.Info("policy in force", "version", revision, "rules", len(p.Rules), "redact", len(p.Redacts))
	g.auditPolicy(revision, nil)
	g.SetPolicy(p)
}

// denyAll is the policy of a node whose first policy does not parse: one rule,
// unreadablePolicy, that denies everything.
func denyAll(revision uint64) *policy.Policy {
	p, err := policy.Parse([]byte("version: 1\nrules:\n  - {name: " + unreadablePolicy + ", action: deny}\n"))
	if err != nil {
		panic("guard: the deny-all policy does not parse: " + err.Error())
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
func (g *Guard) policyKnown() bool {
	select {
	case <-g.ready:
		return true
	default:
		return false
	}
}

// policyWait is how long a request waits for the node's first policy state before
// it is refused (the node has just started and its policy source is not read yet).
const policyWait = 10 * time.Second

// Loaded waits until the guard knows its policy (at most policyWait, or ctx).
// Until then nothing is decided: the request is refused as unavailable, never
// allowed unchecked.
func (g *Guard) Loaded(ctx context.Context) error {
	select {
	case <-g.ready:
		return nil
	default:
	}
	t := time.NewTimer(policyWait)
	defer t.Stop()
	select {
	case <-g.ready:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	return api.Errorf(api.CodeUnavailable, "node %s has not loaded its policy yet: try again", g.cfg.Node)
}

// policyWatchTimeout bounds one attempt to read the policy source.
const policyWatchTimeout = 15 * time.Second

// watchPolicy follows the policy source until the guard closes, starting the
// watch again when it fails. It is a goroutine of the guard (g.wg).
func (g *Guard) watchPolicy() {
	defer g.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		// Bounded, so a source that cannot be read (no JetStream, no permission)
		// is logged below instead of retried in silence.
		wctx, cancel := context.WithTimeout(g.ctx, policyWatchTimeout)
		stop, err := g.cfg.Source.Watch(wctx, g.applyPolicy)
		cancel()
		if err == nil {
			<-g.ctx.Done()
			stop()
			return
		}
		if g.ctx.Err() != nil {
			return
		}
		g.log.Warn("policy source not readable: trying again", "err", err, "known", g.policyKnown())
		t := time.NewTimer(backoff)
		select {
		case <-g.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// Audit actions of records that are not a verb's.
const (
	AuditTyped  = "typed"  // a line typed at an integrated shell's prompt, decided before it ran
	AuditPolicy = "policy" // the node put a policy version in force, or refused one
	AuditSecret = "secret" // a secret the node typed at a password prompt (or could not type)
)

// auditPolicy audits a new policy version put in force (err nil) or refused.
func (g *Guard) auditPolicy(revision uint64, err error) {
	rec := api.AuditRecord{Time: time.Now().UTC(), Node: g.cfg.Node, Action: AuditPolicy, Result: "ok", PolicyVersion: revision}
	if err != nil {
		rec.Result, rec.Error = api.CodeBadRequest, Truncate(err.Error(), 512)
	}
	g.cfg.Audit.Audit(rec)
}

// Truncate cuts s to at most n bytes (on a rune boundary), marking the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

func quoteRule(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
