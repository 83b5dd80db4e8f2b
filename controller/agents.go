package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// Agents (DESIGN "Agents"): the nodes run and track them; the controller routes
// their verbs and keeps their trees whole across nodes: it checks a new child
// against its parent's depth and children fleet-wide, ends the children of an
// agent it kills wherever they run, and lists every agent with its children.

// Agents lists the agents of one node (node), or of every node, each with its
// children fleet-wide. Nodes that do not answer are listed as unavailable.
func (c *Controller) Agents(ctx context.Context, node string) (api.AgentList, error) {
	names := c.nodes.selectNodes(nil)
	if node != "" {
		if err := api.ValidName(node); err != nil {
			return api.AgentList{}, api.Errorf(api.CodeBadRequest, "node: %v", err)
		}
		names = []string{node}
	}
	out, err := c.agentsOf(ctx, principalOf(ctx), names, node != "")
	if err != nil || node != "" {
		return out, err
	}
	linkChildren(out.Agents)
	return out, nil
}

// agentsOf lists the agents of nodes in parallel (strict: the one node's error
// is returned; otherwise nodes that fail are listed as unavailable).
func (c *Controller) agentsOf(ctx context.Context, who principal, names []string, strict bool) (api.AgentList, error) {
	lists := make([]api.AgentList, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() { // owned by this call: joined below
			defer wg.Done()
			errs[i] = c.call(ctx, who, n, api.VerbAgentList, struct{}{}, &lists[i], min(c.cfg.RequestTimeout, 2*time.Second))
		}()
	}
	wg.Wait()
	out := api.AgentList{Agents: []api.Agent{}}
	for i, err := range errs {
		if err != nil {
			if strict {
				return api.AgentList{}, err
			}
			if ctx.Err() != nil {
				return api.AgentList{}, ctx.Err()
			}
			out.Unavailable = append(out.Unavailable, names[i])
			continue
		}
		out.Agents = append(out.Agents, lists[i].Agents...)
	}
	slices.SortFunc(out.Agents, func(a, b api.Agent) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return idOrder(a.ID, b.ID)
	})
	return out, nil
}

// linkChildren sets each agent's children from the others' parents.
func linkChildren(agents []api.Agent) {
	kids := map[string][]string{}
	for _, a := range agents {
		if a.Parent != "" {
			kids[a.Parent] = append(kids[a.Parent], a.Address())
		}
	}
	for i := range agents {
		agents[i].Children = kids[agents[i].Address()]
	}
}

// Agent reads one agent (its children: those on its node).
func (c *Controller) Agent(ctx context.Context, node, id string) (a api.Agent, err error) {
	err = c.agentCall(ctx, node, id, api.VerbAgentGet, nil, &a, 0)
	return a, err
}

func (c *Controller) agentCall(ctx context.Context, node, id, verb string, req, out any, timeout time.Duration) error {
	if req == nil {
		req = api.AgentRequest{Agent: id}
	}
	return c.sessionCall(ctx, node, id, verb, req, out, timeout)
}

// SpawnAgent starts an agent on req.Node, or on the node the table picks. With
// req.Parent ("NODE/ID") it is that agent's child: refused (api.CodeLimit) past
// the tree limits in force (agentLimits): too deep, or the parent has as many
// live children as it may.
func (c *Controller) SpawnAgent(ctx context.Context, req api.SpawnRequest) (api.Agent, error) {
	who := principalOf(ctx)
	if req.Node == "" {
		var ok bool
		if req.Node, ok = c.nodes.pick(); !ok {
			return api.Agent{}, api.Errorf(api.CodeUnavailable, "no alive node to spawn an agent on")
		}
	}
	req.Depth = 0
	if req.Parent != "" {
		// Children are counted and the child started under one lock: two spawns
		// through this controller never both take a parent's last place.
		c.spawnMu.Lock()
		defer c.spawnMu.Unlock()
		pnode, pid, err := api.ParseAddress(req.Parent)
		if err != nil {
			return api.Agent{}, api.Errorf(api.CodeBadRequest, "parent: %v", err)
		}
		parent, err := c.Agent(ctx, pnode, pid)
		if err != nil {
			return api.Agent{}, err
		}
		if api.AgentFinal(parent.State) {
			return api.Agent{}, api.Errorf(api.CodeExited, "parent agent %s has ended (%s)", req.Parent, parent.State)
		}
		all, err := c.agentsOf(ctx, who, c.nodes.selectNodes(nil), false)
		if err != nil {
			return api.Agent{}, err
		}
		children := 0
		for _, a := range all.Agents {
			if a.Parent == req.Parent && !api.AgentFinal(a.State) {
				children++
			}
		}
		req.Depth = parent.Depth + 1
		maxDepth, maxChildren, err := c.agentLimits(ctx)
		if err != nil {
			return api.Agent{}, err
		}
		if err := api.CheckSpawnIn(req.Depth, children, maxDepth, maxChildren); err != nil {
			return api.Agent{}, err
		}
	}
	var a api.Agent
	err := c.call(ctx, who, req.Node, api.VerbAgentSpawn, req, &a, createTimeout)
	return a, err
}

// KillAgent ends an agent and, first, its descendants wherever they run (the
// deepest first). A descendant that is already gone is no error; another
// failure to end one is returned once the agent itself has ended.
func (c *Controller) KillAgent(ctx context.Context, node, id string) (api.Agent, error) {
	if err := api.ValidName(node); err != nil {
		return api.Agent{}, api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	var errs []error
	all, err := c.agentsOf(ctx, principalOf(ctx), c.nodes.selectNodes(nil), false)
	if err == nil {
		for _, d := range descendants(all.Agents, node+"/"+id) {
			var gone api.Agent
			if err := c.agentCall(ctx, d.Node, d.ID, api.VerbAgentKill, nil, &gone, 0); err != nil && !errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
				errs = append(errs, err)
			}
		}
	}
	var a api.Agent
	if err := c.agentCall(ctx, node, id, api.VerbAgentKill, nil, &a, 0); err != nil {
		return api.Agent{}, err
	}
	return a, errors.Join(errs...)
}

// descendants are the agents under addr, the deepest first.
func descendants(agents []api.Agent, addr string) []api.Agent {
	var out []api.Agent
	level := []string{addr}
	for depth := 0; len(level) > 0 && depth <= api.MaxSpawnDepthCap+1; depth++ {
		var next []string
		for _, a := range agents {
			if slices.Contains(level, a.Parent) {
				out = append(out, a)
				next = append(next, a.Address())
			}
		}
		level = next
	}
	slices.Reverse(out)
	return out
}

// SendAgent types a prompt into an agent and submits it.
func (c *Controller) SendAgent(ctx context.Context, node, id, text string) (a api.Agent, err error) {
	err = c.agentCall(ctx, node, id, api.VerbAgentSend, api.AgentSendRequest{Agent: id, Text: text}, &a, 0)
	return a, err
}

// InterruptAgent interrupts an agent's work (its driver's keys).
func (c *Controller) InterruptAgent(ctx context.Context, node, id string) (a api.Agent, err error) {
	err = c.agentCall(ctx, node, id, api.VerbAgentInterrupt, nil, &a, 0)
	return a, err
}

// WaitAgent waits until an agent is in one of states (none: ready or a final
// state), for at most timeoutMS.
func (c *Controller) WaitAgent(ctx context.Context, node, id string, states []string, timeoutMS int) (wr api.AgentWaitReply, err error) {
	timeoutMS = min(max(timeoutMS, 0), int(api.MaxWait/time.Millisecond))
	err = c.agentCall(ctx, node, id, api.VerbAgentWait, api.AgentWaitRequest{Agent: id, States: states, TimeoutMS: timeoutMS}, &wr, c.timeoutFor(timeoutMS))
	return wr, err
}

// AgentOutput reads what an agent printed since cursor, as text.
func (c *Controller) AgentOutput(ctx context.Context, node, id string, cursor int64, maxBytes int) (out api.AgentOutput, err error) {
	err = c.agentCall(ctx, node, id, api.VerbAgentOutput, api.AgentOutputRequest{Agent: id, Cursor: cursor, MaxBytes: maxBytes}, &out, 0)
	return out, err
}

// agentLimits are the tree limits of the policy in force (its agents section),
// else the defaults. A store that cannot be read is an error: the policy may
// set limits tighter than the defaults.
func (c *Controller) agentLimits(ctx context.Context) (depth, children int, err error) {
	if c.cfg.Policy == nil {
		return api.MaxSpawnDepth, api.MaxChildren, nil
	}
	doc, _, err := c.cfg.Policy.Get(ctx)
	if err != nil {
		return 0, 0, api.Errorf(api.CodeUnavailable, "the policy store (tree limits): %v", err)
	}
	if doc == nil {
		return api.MaxSpawnDepth, api.MaxChildren, nil
	}
	pol, err := policy.Parse(doc)
	if err != nil {
		return 0, 0, api.Errorf(api.CodeUnavailable, "the stored policy (tree limits): %v", err)
	}
	depth, children = pol.AgentLimits()
	return depth, children, nil
}
