package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/fleetmux/fleetmux/api"
)

// Agents lists the coding agents of one node (node), or of every node with "".
func (c *Client) Agents(ctx context.Context, node string) (api.AgentList, error) {
	var out api.AgentList
	q := url.Values{}
	if node != "" {
		if err := checkName("node name", node); err != nil {
			return out, err
		}
		q.Set("node", node)
	}
	err := c.do(ctx, http.MethodGet, "/v1/agents", q, nil, &out)
	return out, err
}

// SpawnAgent starts a coding agent (POST /v1/agents).
func (c *Client) SpawnAgent(ctx context.Context, req api.SpawnRequest) (api.Agent, error) {
	var out api.Agent
	if req.Node != "" {
		if err := checkName("node name", req.Node); err != nil {
			return out, err
		}
	}
	err := c.do(ctx, http.MethodPost, "/v1/agents", nil, req, &out)
	return out, err
}

// agentCall calls a route under /v1/agents/{node}/{id}.
func (c *Client) agentCall(ctx context.Context, method, node, id, suffix string, q url.Values, in, out any) error {
	p, err := sessionPath(node, id, suffix)
	if err != nil {
		return err
	}
	return c.do(ctx, method, "/v1/agents/"+strings.TrimPrefix(p, "/v1/sessions/"), q, in, out)
}

// Agent reads one agent.
func (c *Client) Agent(ctx context.Context, node, id string) (api.Agent, error) {
	var out api.Agent
	err := c.agentCall(ctx, http.MethodGet, node, id, "", nil, nil, &out)
	return out, err
}

// KillAgent ends an agent and its children.
func (c *Client) KillAgent(ctx context.Context, node, id string) (api.Agent, error) {
	var out api.Agent
	err := c.agentCall(ctx, http.MethodDelete, node, id, "", nil, nil, &out)
	return out, err
}

// SendAgent types a prompt into an agent and submits it.
func (c *Client) SendAgent(ctx context.Context, node, id, text string) (api.Agent, error) {
	var out api.Agent
	err := c.agentCall(ctx, http.MethodPost, node, id, "/send", nil, api.AgentSendBody{Text: text}, &out)
	return out, err
}

// InterruptAgent interrupts an agent's work.
func (c *Client) InterruptAgent(ctx context.Context, node, id string) (api.Agent, error) {
	var out api.Agent
	err := c.agentCall(ctx, http.MethodPost, node, id, "/interrupt", nil, nil, &out)
	return out, err
}

// WaitAgent waits until an agent is in one of states (none: ready or a final
// state), for at most timeoutMS (0: the server's default).
func (c *Client) WaitAgent(ctx context.Context, node, id string, states []string, timeoutMS int) (api.AgentWaitReply, error) {
	var out api.AgentWaitReply
	q := url.Values{}
	if len(states) > 0 {
		q.Set("state", strings.Join(states, ","))
	}
	setInt(q, "timeout_ms", int64(timeoutMS))
	err := c.agentCall(ctx, http.MethodGet, node, id, "/wait", q, nil, &out)
	return out, err
}

// AgentOutput reads what an agent printed since cursor, as text (at most maxBytes;
// 0: the server's budget), with its screen and the next cursor.
func (c *Client) AgentOutput(ctx context.Context, node, id string, cursor int64, maxBytes int) (api.AgentOutput, error) {
	var out api.AgentOutput
	q := url.Values{}
	setInt(q, "cursor", cursor)
	setInt(q, "max_bytes", int64(maxBytes))
	err := c.agentCall(ctx, http.MethodGet, node, id, "/output", q, nil, &out)
	return out, err
}
