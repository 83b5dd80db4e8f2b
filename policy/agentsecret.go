package policy

import (
	"slices"

	"github.com/fleetmux/fleetmux/api"
)

// AgentProgram is how a secrets entry names the agents of a driver among its
// programs ("agent:claude"): such an entry lets its writers put the stored
// secret into the environment of an agent of that driver (DESIGN "Agents": the
// model's API key), never type it at a prompt of another program.
//
//	secrets:
//	  - name: anthropic-key
//	    roles: [operator]
//	    programs: ['agent:claude']
func AgentProgram(driver string) string { return "agent:" + driver }

// AgentSecret reports whether the policy lets the writer (principal, role) give
// an agent of driver on node the stored secret name in its environment: the
// first entry of that name whose nodes fit and whose programs list
// AgentProgram(driver) decides, by its roles and principals (operator at least,
// as for a prompt). Its prompt plays no part. A nil *Policy allows nothing.
func (p *Policy) AgentSecret(name, node, principal, role, driver string) bool {
	if p == nil {
		return false
	}
	for _, s := range p.Secrets {
		if s.Name != name || !slices.Contains(s.Programs, AgentProgram(driver)) {
			continue
		}
		if s.nodes != nil && !s.nodes.MatchString(node) {
			continue
		}
		if !api.RoleAtLeast(role, api.RoleOperator) {
			return false
		}
		if slices.Contains(s.Roles, role) {
			return true
		}
		for _, g := range s.principals {
			if g.MatchString(principal) {
				return true
			}
		}
		return false
	}
	return false
}
