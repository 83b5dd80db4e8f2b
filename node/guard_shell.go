package node

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/session"
)

// The lines an integrated shell asks about before it runs them (session.Config.Guard,
// session/guard.go): typed with input or keys, in an attach, or by run. A line the
// node itself decided and typed (run, an approved held run: expectLine) passes without
// a second decision; any other is decided by enforce for the session's last writer
// (the lease holder: whoever typed it), audited as "typed", and held for a person
// when the policy says approve (the line waits unexecuted at the prompt).

// shellGuard is the session.Config.Guard of a session whose entry ep will hold once
// it is registered (a line asked about before that is refused: nobody typed it).
func (n *Node) shellGuard(ep *atomic.Pointer[entry]) func(ctx context.Context, line string) session.GuardVerdict {
	return func(ctx context.Context, line string) session.GuardVerdict {
		e := ep.Load()
		if e == nil {
			return session.GuardVerdict{Message: "the session is not registered yet"}
		}
		return n.guardLine(ctx, e, line)
	}
}

// guardLine decides line for e's shell; it blocks while an approval waits (until
// ctx ends: the shell asked about a newer line, or the session closed).
func (n *Node) guardLine(ctx context.Context, e *entry, line string) session.GuardVerdict {
	if e.expected(line) {
		return session.GuardVerdict{Allow: true}
	}
	err := n.enforce(ctx, e, e.lastWriter(), line)
	if err == nil {
		return session.GuardVerdict{Allow: true}
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		n.log.Warn("guard: a line could not be decided: denied", "session", e.id, "err", err)
		return session.GuardVerdict{Message: "the node could not decide it"}
	}
	v := session.GuardVerdict{Rule: ae.Rule}
	switch {
	case ae.Code != api.CodeDenied || ae.Approval != "":
		v.Message = ae.Message // an approval denied or expired, the policy not known yet, too many held
	case ae.Rule == unknownWriter:
		v.Message = "this agent does not know who typed the line (it was typed before the agent restarted): type it again"
	}
	return v
}

// shellAsks reports whether a command Run types may go to an integrated shell's
// prompt, which asks about it before it runs: then the node marks it pre-approved
// (expectLine). Whatever the state now (starting, at the prompt, between a command's
// end and the prompt, the guard's answer to a typed line being acted on): the prompt
// may come back before Run types; a mark that is not used lapses, and passes only
// that very line.
func (e *entry) shellAsks() bool {
	return e.s.Info().Integration == session.IntegrationOK
}
