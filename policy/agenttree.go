package policy

import (
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/fleetmux/fleetmux/api"
)

// AgentTree are a policy's limits on trees of agents (DESIGN "Agents"):
//
//	agents:
//	  max_depth: 3       # levels of agents (1: no agent spawns agents); 1 to api.MaxSpawnDepthCap
//	  max_children: 20   # live children of one agent; 1 to api.MaxChildrenCap
//
// A zero field is the default (api.MaxSpawnDepth, api.MaxChildren).
type AgentTree struct {
	MaxDepth, MaxChildren int
}

// AgentLimits are the tree limits in force under pol (nil: no policy): its
// agents section's, else the defaults.
func (pol *Policy) AgentLimits() (depth, children int) {
	depth, children = api.MaxSpawnDepth, api.MaxChildren
	if pol == nil {
		return depth, children
	}
	if pol.Agents.MaxDepth > 0 {
		depth = pol.Agents.MaxDepth
	}
	if pol.Agents.MaxChildren > 0 {
		children = pol.Agents.MaxChildren
	}
	return depth, children
}

func (p *parser) agentTree(n *yaml.Node) AgentTree {
	var t AgentTree
	for _, kv := range p.mapping(n, "agents", "max_depth", "max_children") {
		k, v := kv[0], kv[1]
		field := "agents." + k.Value
		limit, dst := api.MaxSpawnDepthCap, &t.MaxDepth
		if k.Value == "max_children" {
			limit, dst = api.MaxChildrenCap, &t.MaxChildren
		}
		x, err := strconv.Atoi(p.str(v, field))
		if p.err == nil && (err != nil || x < 1 || x > limit) {
			p.fail(v, field, "want a whole number from 1 to %d, got %q", limit, v.Value)
		}
		*dst = x
	}
	return t
}
