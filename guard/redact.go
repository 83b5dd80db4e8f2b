package guard

import (
	"slices"
	"sync"

	"github.com/fleetmux/fleetmux/policy"
)

// Redaction settings (DESIGN.md "Guardrails"): what the node redacts is the policy
// in force with the stored secrets' values added (Redaction). The node gives every
// session a redactor of it and follows its changes (OnRedaction): a new policy
// version, a secret stored or removed. Command text the node sends out (audit
// records, approvals) is redacted with it (RedactText).

// redactFollowers are the functions told of a change of what is redacted.
type redactFollowers struct {
	mu  sync.Mutex // guards fns
	fns []func()
}

func (r *redactFollowers) changed() {
	r.mu.Lock()
	fns := slices.Clone(r.fns)
	r.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// OnRedaction registers f to be called whenever what is redacted may have
// changed: every policy version put in force and every change of the stored
// secrets (and once at once). f reads Redaction itself; it must not block long,
// and must serialise its own work (two changes may call it at once).
func (g *Guard) OnRedaction(f func()) {
	g.redact.mu.Lock()
	g.redact.fns = append(g.redact.fns, f)
	g.redact.mu.Unlock()
	g.OnPolicy(func(*policy.Policy) { f() })
}

// Redaction is the policy in force (nil: none) with the stored secrets' literal
// patterns added to its redact patterns: what sessions redact under.
func (g *Guard) Redaction() *policy.Policy { return g.withSecrets(g.Policy()) }

// RedactText redacts command text under Redaction (audit records, approvals).
func (g *Guard) RedactText(s string) string { return g.Redaction().RedactText(s) }

// SameRedacts reports whether a and b redact the same patterns (a new version that
// changes only rules keeps the sessions' redactors and what they hold back).
func SameRedacts(a, b *policy.Policy) bool {
	var ra, rb []policy.Redact
	if a != nil {
		ra = a.Redacts
	}
	if b != nil {
		rb = b.Redacts
	}
	return slices.EqualFunc(ra, rb, func(x, y policy.Redact) bool { return x.Name == y.Name && x.Pattern == y.Pattern })
}
