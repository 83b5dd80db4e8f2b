package node

import (
	"errors"
	"strings"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/trust"
)

// Verifier checks a request's signed envelope (the api.HeaderAuth header) against
// the subject it was published to and its body, and says who signed it
// (trust.Verifier in production). Implementations are safe for concurrent use.
type Verifier interface {
	Verify(subject string, body []byte, header string) (trust.Principal, error)
}

var _ Verifier = (*trust.Verifier)(nil)

// authorize verifies req's envelope, fills in who made it, and checks that its role
// may use the verb. It runs before anything else of a request. The refusal says
// what is wrong, never what the header held.
func (n *Node) authorize(subject string, header map[string]string, req *request) *api.Error {
	p, err := n.cfg.Verifier.Verify(subject, req.data, header[api.HeaderAuth])
	if err != nil {
		return n.refusal(req.verb, err)
	}
	req.actor, req.principal, req.role, req.controller, req.verified = p.Actor, p.Principal, p.Role, p.Controller, true
	if !trust.Allows(p.Role, req.verb) {
		return api.Errorf(api.CodeForbidden, "the %s role may not use %s on node %s", p.Role, req.verb, n.cfg.Name)
	}
	return nil
}

// refusal is the error reply of a request whose envelope Verify refused.
func (n *Node) refusal(verb string, err error) *api.Error {
	msg := strings.TrimPrefix(err.Error(), "trust: ")
	switch {
	case errors.Is(err, trust.ErrUnsigned):
		return api.Errorf(api.CodeUnauthorized, "%s refused: the request is not signed (%s missing): node requests come through a controller", verb, api.HeaderAuth)
	case errors.Is(err, trust.ErrReplayFull), errors.Is(err, trust.ErrBeforeStart):
		return api.Errorf(api.CodeBusy, "%s refused: %s", verb, msg)
	case errors.Is(err, trust.ErrUnknownRole):
		return api.Errorf(api.CodeForbidden, "%s refused: %s", verb, msg)
	case errors.Is(err, trust.ErrMalformed), errors.Is(err, trust.ErrUnknownKey), errors.Is(err, trust.ErrBadSignature),
		errors.Is(err, trust.ErrExpired), errors.Is(err, trust.ErrReplayed):
		return api.Errorf(api.CodeUnauthorized, "%s refused: %s", verb, msg)
	}
	n.log.Warn("request not verified", "verb", verb, "err", err)
	return api.Errorf(api.CodeUnauthorized, "%s refused: its signature could not be verified", verb)
}
