package node

import (
	"sync"

	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/policy"
	"github.com/fleetmux/fleetmux/session"
)

// Redaction at the node (DESIGN.md "Guardrails"): every session's output passes
// through a redactor of what the guard redacts (guard.Redaction: the policy in
// force with the stored secrets) before it gets offsets (session redact.go), so
// the stream, read, blocks, the screen and the recording carry the same redacted
// bytes at the same offsets. A new session starts with the redactor in force; at
// each change with other patterns every session's redactor is replaced (the old
// one releases what it holds back first). Output from before a policy came is not
// changed: its offsets are given.

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

// followRedaction makes every session follow what the guard redacts (registered
// once, by New, with guard.OnRedaction).
func (n *Node) followRedaction() {
	n.redaction.mu.Lock()
	defer n.redaction.mu.Unlock()
	// Read under the lock, so a secret's change and a new version never apply out
	// of order.
	p := n.guard.Redaction()
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
	if guard.SameRedacts(e.redactFor, p) {
		e.redactFor = p
		return
	}
	e.redactFor = p
	e.s.SetRedactor(sessionRedactor(p))
}

// newSessionRedactor is the redactor a session starts with, and the policy it is
// from (pass both to redactStarted once the session is registered).
func (n *Node) newSessionRedactor() (session.Redactor, *policy.Policy) {
	p := n.guard.Redaction()
	return sessionRedactor(p), p
}

// redactStarted records that e's session started with p's redactor, and gives it
// the redactor in force if that changed in between (a change that came before e
// was registered, which followRedaction did not see).
func (n *Node) redactStarted(e *entry, p *policy.Policy) {
	n.redaction.mu.Lock()
	defer n.redaction.mu.Unlock()
	e.redactFor = p
	e.redactUnder(n.guard.Redaction())
}

// redactText redacts command text under what the guard redacts (audit records).
func (n *Node) redactText(s string) string { return n.guard.RedactText(s) }
