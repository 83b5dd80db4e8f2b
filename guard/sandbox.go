package guard

import (
	"errors"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// Sandbox chooses the sandbox profile of a new session that w creates with
// labels, for an agent of driver ("" for none), asking for asked ("" for the
// policy's choice): policy.Policy.Sandbox under the policy in force (the
// caller has waited for it: Loaded). nil: no profile. A profile create may not
// ask for is CodeSandbox (looser than the choice) or CodeBadRequest (unknown).
func (g *Guard) Sandbox(w Writer, labels map[string]string, driver, asked string) (*api.SandboxProfile, error) {
	p := g.Policy()
	prof, err := p.Sandbox(policy.Request{Principal: w.Principal, Actor: w.Actor, Role: w.Role,
		Node: g.cfg.Node, NodeLabels: g.cfg.Labels, SessionLabels: labels, Agent: driver}, asked)
	switch {
	case errors.Is(err, policy.ErrLooser):
		return nil, api.Errorf(api.CodeSandbox, "%v on node %s: ask for a stricter one or none: nothing was started", err, g.cfg.Node)
	case errors.Is(err, policy.ErrUnknownProfile):
		return nil, api.Errorf(api.CodeBadRequest, "%v in the policy of node %s", err, g.cfg.Node)
	case err != nil:
		return nil, err
	}
	return prof, nil
}
