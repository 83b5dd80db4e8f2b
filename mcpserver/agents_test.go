package mcpserver

import (
	"context"

	"github.com/fleetmux/fleetmux/api"
)

// The fake fleet has no agents.

func (f *fake) Agents(ctx context.Context, node string) (api.AgentList, error) {
	return api.AgentList{Agents: []api.Agent{}}, nil
}

func (f *fake) SpawnAgent(ctx context.Context, req api.SpawnRequest) (api.Agent, error) {
	return api.Agent{}, api.Errorf(api.CodeUnavailable, "no node")
}

func (f *fake) KillAgent(ctx context.Context, node, id string) (api.Agent, error) {
	return api.Agent{}, api.Errorf(api.CodeNotFound, "no agent %s/%s", node, id)
}

func (f *fake) SendAgent(ctx context.Context, node, id, text string) (api.Agent, error) {
	return api.Agent{}, api.Errorf(api.CodeNotFound, "no agent %s/%s", node, id)
}

func (f *fake) InterruptAgent(ctx context.Context, node, id string) (api.Agent, error) {
	return api.Agent{}, api.Errorf(api.CodeNotFound, "no agent %s/%s", node, id)
}

func (f *fake) WaitAgent(ctx context.Context, node, id string, states []string, timeoutMS int) (api.AgentWaitReply, error) {
	return api.AgentWaitReply{}, api.Errorf(api.CodeNotFound, "no agent %s/%s", node, id)
}

func (f *fake) AgentOutput(ctx context.Context, node, id string, cursor int64, maxBytes int) (api.AgentOutput, error) {
	return api.AgentOutput{}, api.Errorf(api.CodeNotFound, "no agent %s/%s", node, id)
}
