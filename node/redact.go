package node

import (
	"slices"
	"sync"

	"github.com/fleetmux/fleetmux/policy"
	"github.com/fleetmux/fleetmux/session"
)

// Redaction at the node (DESIGN.md "Guardrails"): every session's output passes
// through a redactor of the policy in force before it gets offsets (session
// redact.go), so the stream, read, blocks, the screen and the recording carry the
// same redacted bytes at the same offsets. A new session starts with the redactor
// of the policy in force; at each new policy version with other redact patterns
// every session's redactor is replaced (the old one releases what it holds back
// first). Command text the node sends out (audit records) is redacted with the
// policy in force. Output from before a policy came is not changed: its offsets
// are given.

var _ session.Redactor = (*policy.Redactor)(nil)

// redaction is the node's redaction state.
type redaction struct {
	mu sync.Mutex // serialises the redactor changes of sessions; guards entry.redactFor
}

// sessionRedactor is a session's redactor under p: nil when p redacts nothing (the
// read loop then writes output as it comes).
func sessionRedactor(p *policy.Policy) session.Redactor {
	if p == nil || len(p.Redacts) == 0 {
		return nil
	}
	return p.NewRedactor()
}

// sameRedacts reports whether a and b redact the same patterns (a new version that
// changes only rules keeps the sessions' redactors and what they hold back).
func sameRedacts(a, b *policy.Policy) bool {
	var ra, rb []policy.Redact
	if a != nil {
		ra = a.Redacts
	}
	if b != nil {
		rb = b.Redacts
	}
	return slices.EqualFunc(ra, rb, func(x, y policy.Redact) bool { return x.Name == y.Name && x.Pattern == y.Pattern })
}

// followRedaction makes every session follow the policy in force (registered once,
// by New, with onPolicy).
func (n *Node) followRedaction(*policy.Policy) {
	n.redaction.mu.Lock()
	defer n.redaction.mu.Unlock()
	// The policy in force now (onPolicy's argument, or a newer one), with the
	// stored secrets (secret.go): read under the lock, so a secret's change and a
	// new version never apply out of order.
	p := n.withSecrets(n.policy())
	n.mu.Lock()
	entries := make([]*entry, 0, len(n.sessions))
	for _, e := range n.sessions {
		entries = append(entries, e)
	}
	n.mu.Unlock()
	for _, e := range entries {
		e.redactUnder(p)
	}
}

// redactUnder gives e's session p's redactor unless it has one for the same
// patterns. Called with n.redaction.mu held.
func (e *entry) redactUnder(p *policy.Policy) {
	if sameRedacts(e.redactFor, p) {
		e.redactFor = p
		return
	}
	e.redactFor = p
	e.s.SetRedactor(sessionRedactor(p))
}

// newSessionRedactor is the redactor a session starts with, and the policy it is
// from (pass both to redactStarted once the session is registered).
func (n *Node) newSessionRedactor() (session.Redactor, *policy.Policy) {
	p := n.withSecrets(n.policy())
	return sessionRedactor(p), p
}

// redactStarted records that e's session started with p's redactor, and gives it
// the redactor of the policy in force if that changed in between (a new version
// that came before e was registered, which followRedaction did not see).
func (n *Node) redactStarted(e *entry, p *policy.Policy) {
	n.redaction.mu.Lock()
	defer n.redaction.mu.Unlock()
	e.redactFor = p
	e.redactUnder(n.withSecrets(n.policy()))
}

// redactText redacts command text under the policy in force (audit records).
func (n *Node) redactText(s string) string { return n.withSecrets(n.policy()).RedactText(s) }
