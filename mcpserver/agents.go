package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fleetmux/fleetmux/api"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The agent tools (DESIGN "Agents"): spawn coding agents (Claude Code, Codex, …)
// on the fleet's nodes, prompt them, wait for their states, read what they print.
// Descriptions and schemas are short: every client reads tools/list.

// AgentFleet is what the agent tools need of the fleet (part of Fleet).
type AgentFleet interface {
	Agents(ctx context.Context, node string) (api.AgentList, error)
	SpawnAgent(ctx context.Context, req api.SpawnRequest) (api.Agent, error)
	KillAgent(ctx context.Context, node, id string) (api.Agent, error)
	SendAgent(ctx context.Context, node, id, text string) (api.Agent, error)
	InterruptAgent(ctx context.Context, node, id string) (api.Agent, error)
	WaitAgent(ctx context.Context, node, id string, states []string, timeoutMS int) (api.AgentWaitReply, error)
	AgentOutput(ctx context.Context, node, id string, cursor int64, maxBytes int) (api.AgentOutput, error)
}

type (
	spawnAgentIn struct {
		Node    string            `json:"node,omitempty" jsonschema:"default: the controller's choice"`
		Driver  string            `json:"driver"`
		Cwd     string            `json:"cwd,omitempty"`
		Prompt  string            `json:"prompt,omitempty" jsonschema:"sent once it is ready"`
		Parent  string            `json:"parent,omitempty" jsonschema:"the spawning agent, NODE/ID"`
		Program string            `json:"program,omitempty" jsonschema:"the CLI (default: the driver's)"`
		Labels  map[string]string `json:"labels,omitempty"`
		Secrets map[string]string `json:"secrets,omitempty" jsonschema:"environment variable → node secret name, e.g. ANTHROPIC_API_KEY → anthropic (the policy's secrets decide)"`
	}
	listAgentsIn struct {
		Node string `json:"node,omitempty"`
	}
	agentIn struct {
		Node  string `json:"node"`
		Agent string `json:"agent" jsonschema:"the agent id, e.g. s3"`
	}
	sendToAgentIn struct {
		Node  string `json:"node"`
		Agent string `json:"agent"`
		Text  string `json:"text" jsonschema:"the prompt"`
	}
	waitForAgentIn struct {
		Node      string `json:"node"`
		Agent     string `json:"agent"`
		State     string `json:"state,omitempty" jsonschema:"comma-separated states (default ready,done,error,exited)"`
		TimeoutMS int    `json:"timeout_ms,omitempty"`
	}
	readAgentOutputIn struct {
		Node     string `json:"node"`
		Agent    string `json:"agent"`
		Cursor   int64  `json:"cursor,omitempty" jsonschema:"the cursor of the last read"`
		MaxBytes int    `json:"max_bytes,omitempty"`
	}
)

type (
	// Agent is an agent in the agent tools' structured content (its children are
	// the agents whose parent it is).
	Agent struct {
		Node   string `json:"node"`
		ID     string `json:"id"`
		State  string `json:"state"`
		Parent string `json:"parent,omitempty"`
	}
	// Agents is list_agents' structured content.
	Agents struct {
		Agents []Agent `json:"agents"` // never nil
	}
	// AgentText is read_agent_output's structured content.
	AgentText struct {
		Agent
		Cursor int64 `json:"cursor"`
	}
)

func agentOut(a api.Agent) Agent {
	return Agent{Node: a.Node, ID: a.ID, State: a.State, Parent: a.Parent}
}

// agentLine is one agent in words; its evidence (screen text) quoted.
func agentLine(a api.Agent) string {
	s := fmt.Sprintf("%s (%s) %s", a.Address(), a.Driver, a.State)
	if a.StateSource != "" {
		s += " from " + a.StateSource
	}
	if a.Evidence != "" {
		s += fmt.Sprintf(" %q", api.OneLine(a.Evidence, 160))
	}
	return s
}

func checkAgent(node, id string) error {
	if err := checkSession(node, id); err != nil {
		return toolErrf("%s", strings.NewReplacer("session", "agent", "list_sessions", "list_agents", "create_session", "spawn_agent").Replace(err.Error()))
	}
	return nil
}

// explainAgent is explain for the agent tools: an agent not found is named so.
func (m *Server) explainAgent(err error, node, id string) error {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeNotFound && !strings.HasPrefix(ae.Message, "unknown node") {
		return &toolError{msg: fmt.Sprintf("no agent %s: call list_agents to see the agents, or spawn_agent", addr(node, id)), code: api.CodeNotFound}
	}
	return m.explain(err, node, id)
}

func agentAudit[In any](f func(In) (string, string, string)) auditFn[In] { return sessionAudit(f) }

func (m *Server) addAgentTools() {
	af := m.f
	addTool(m, &mcp.Tool{
		Name: "spawn_agent",
		Description: "Start a coding agent CLI (driver claude, codex, opencode, gemini, aider) on a node; returns NODE/ID. " +
			"Its states: booting, ready, working, waiting_permission, waiting_input, done, error, exited.",
		Annotations: annRun("Spawn an agent"),
		InputSchema: schemaOf[spawnAgentIn](func(p map[string]*jsonschema.Schema) {
			p["driver"].Enum = []any{api.DriverClaude, api.DriverCodex, api.DriverOpenCode, api.DriverGemini, api.DriverAider}
		}),
	}, func(in spawnAgentIn) (string, string) {
		return "", fmt.Sprintf("node %q driver %q parent %q", in.Node, in.Driver, in.Parent)
	}, func(ctx context.Context, in spawnAgentIn) (*mcp.CallToolResult, Agent, error) {
		a, err := af.SpawnAgent(ctx, api.SpawnRequest{Node: in.Node, Driver: in.Driver, Cwd: in.Cwd, Prompt: in.Prompt,
			Parent: in.Parent, Program: in.Program, Labels: in.Labels, Secrets: in.Secrets})
		if err != nil {
			return nil, Agent{}, m.explain(err, in.Node, "")
		}
		return textResult("spawned " + agentLine(a) + "\ncall wait_for_agent for ready"), agentOut(a), nil
	})

	addTool(m, &mcp.Tool{
		Name:        "list_agents",
		Description: "List the coding agents: NODE/ID, driver, state and why, parent.",
		Annotations: annRead("List agents"),
	}, nil, func(ctx context.Context, in listAgentsIn) (*mcp.CallToolResult, Agents, error) {
		l, err := af.Agents(ctx, in.Node)
		if err != nil {
			return nil, Agents{}, m.explain(err, in.Node, "")
		}
		out := Agents{Agents: []Agent{}}
		var b strings.Builder
		for _, a := range l.Agents {
			out.Agents = append(out.Agents, agentOut(a))
			b.WriteString(agentLine(a))
			if strings.Contains(a.Parent, "/") {
				b.WriteString(", child of " + a.Parent)
			}
			b.WriteString("\n")
		}
		if len(l.Agents) == 0 {
			b.WriteString("no agents: spawn_agent starts one\n")
		}
		if len(l.Unavailable) > 0 {
			b.WriteString("unavailable nodes: " + strings.Join(l.Unavailable, ", ") + "\n")
		}
		return textResult(b.String()), out, nil
	})

	addTool(m, &mcp.Tool{
		Name:        "send_to_agent",
		Description: "Send an agent a prompt (typed and submitted). Then call wait_for_agent.",
		Annotations: annRun("Prompt an agent"),
	}, agentAudit(func(in sendToAgentIn) (string, string, string) {
		return in.Node, in.Agent, fmt.Sprintf("prompt of %d bytes", len(in.Text))
	}), func(ctx context.Context, in sendToAgentIn) (*mcp.CallToolResult, Agent, error) {
		if err := checkAgent(in.Node, in.Agent); err != nil {
			return nil, Agent{}, err
		}
		a, err := af.SendAgent(ctx, in.Node, in.Agent, in.Text)
		if err != nil {
			return nil, Agent{}, m.explainAgent(err, in.Node, in.Agent)
		}
		return textResult("sent to " + agentLine(a)), agentOut(a), nil
	})

	addTool(m, &mcp.Tool{
		Name:        "wait_for_agent",
		Description: "Wait until an agent is in one of the states (default ready or ended), for at most timeout_ms (default 30 s). ok false: timed out.",
		Annotations: annRead("Wait for an agent"),
		InputSchema: schemaOf[waitForAgentIn](func(p map[string]*jsonschema.Schema) { minimum(p, 0, "timeout_ms") }),
	}, nil, func(ctx context.Context, in waitForAgentIn) (*mcp.CallToolResult, Agent, error) {
		if err := checkAgent(in.Node, in.Agent); err != nil {
			return nil, Agent{}, err
		}
		states, err := api.ParseAgentStates(in.State)
		if err != nil {
			return nil, Agent{}, toolErrf("%s", err.(*api.Error).Message)
		}
		ms, err := checkTimeout(in.TimeoutMS)
		if err != nil {
			return nil, Agent{}, err
		}
		w, err := af.WaitAgent(ctx, in.Node, in.Agent, states, ms)
		if err != nil {
			return nil, Agent{}, m.explainAgent(err, in.Node, in.Agent)
		}
		return textResult(fmt.Sprintf("ok %v: %s", w.OK, agentLine(w.Agent))), agentOut(w.Agent), nil
	})

	addTool(m, &mcp.Tool{
		Name:        "read_agent_output",
		Description: "Read what an agent printed since cursor (head and tail), and its screen; pass the returned cursor next time.",
		Annotations: annRead("Read an agent's output"),
		InputSchema: schemaOf[readAgentOutputIn](func(p map[string]*jsonschema.Schema) { minimum(p, 0, "cursor", "max_bytes") }),
	}, nil, func(ctx context.Context, in readAgentOutputIn) (*mcp.CallToolResult, AgentText, error) {
		if err := checkAgent(in.Node, in.Agent); err != nil {
			return nil, AgentText{}, err
		}
		budget := in.MaxBytes
		if budget <= 0 {
			budget = m.maxText
		}
		o, err := af.AgentOutput(ctx, in.Node, in.Agent, in.Cursor, min(budget, maxTextBytes))
		if err != nil {
			return nil, AgentText{}, m.explainAgent(err, in.Node, in.Agent)
		}
		text := fmt.Sprintf("%s, cursor %d\n%s\nscreen:\n%s", agentLine(o.Agent), o.Cursor, fence("output", o.Text), fence("screen", o.Screen))
		if len(o.Turns) > 0 {
			text += "\nturns (what it was asked, its tools and their results, its answers; the last first):\n" + fence("turns", turnsText(o.Turns))
		}
		return textResult(text), AgentText{Agent: agentOut(o.Agent), Cursor: o.Cursor}, nil
	})

	addTool(m, &mcp.Tool{
		Name:        "interrupt_agent",
		Description: "Interrupt an agent's work (Esc or C-c, as its CLI wants); it is ready again after.",
		Annotations: annRun("Interrupt an agent"),
	}, agentAudit(func(in agentIn) (string, string, string) { return in.Node, in.Agent, "" }),
		func(ctx context.Context, in agentIn) (*mcp.CallToolResult, Agent, error) {
			if err := checkAgent(in.Node, in.Agent); err != nil {
				return nil, Agent{}, err
			}
			a, err := af.InterruptAgent(ctx, in.Node, in.Agent)
			if err != nil {
				return nil, Agent{}, m.explainAgent(err, in.Node, in.Agent)
			}
			return textResult("interrupted " + agentLine(a)), agentOut(a), nil
		})

	addTool(m, &mcp.Tool{
		Name:        "kill_agent",
		Description: "End an agent you spawned (an admin may end any), and its children on every node.",
		Annotations: &mcp.ToolAnnotations{Title: "Kill an agent", DestructiveHint: boolp(true), IdempotentHint: true, OpenWorldHint: boolp(false)},
	}, agentAudit(func(in agentIn) (string, string, string) { return in.Node, in.Agent, "" }),
		func(ctx context.Context, in agentIn) (*mcp.CallToolResult, Agent, error) {
			if err := checkAgent(in.Node, in.Agent); err != nil {
				return nil, Agent{}, err
			}
			a, err := af.KillAgent(ctx, in.Node, in.Agent)
			if err != nil {
				return nil, Agent{}, m.explainAgent(err, in.Node, in.Agent)
			}
			return textResult("killed " + agentLine(a)), agentOut(a), nil
		})
}

// turnsText renders an agent's turns, the last first, within maxTextBytes.
func turnsText(turns []api.AgentTurn) string {
	var b strings.Builder
	for i := len(turns) - 1; i >= 0 && b.Len() < maxTextBytes; i-- {
		t := turns[i]
		head := fmt.Sprintf("#%d %s", t.Seq, t.Kind)
		if t.Tool != "" {
			head += " " + t.Tool + "(" + api.OneLine(t.Input, 200) + ")"
		}
		b.WriteString(head + ": " + t.Text + "\n")
	}
	return b.String()
}
