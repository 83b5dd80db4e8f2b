package controller

import (
	"context"
	"net/http"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/mcpserver"
)

// MCP at /mcp: the server of package mcpserver over the controller itself.

// mcpFleet is the controller as the Fleet of its MCP server: Fleet calls under
// the names of the HTTP API's client. Who acts comes from the context
// (mcpserver's WithActor and WithCaller options set it: the actor label, the
// principal and role of the request's API token).
type mcpFleet struct{ c *Controller }

var _ mcpserver.Fleet = mcpFleet{}

func (f mcpFleet) Nodes(ctx context.Context) (api.NodeList, error) {
	nodes, err := f.c.ListNodes(ctx)
	return api.NodeList{Nodes: nodes}, err
}

func (f mcpFleet) Sessions(ctx context.Context, q api.SessionFilter) (api.SessionList, error) {
	return f.c.ListSessions(ctx, q.Node, q.Labels)
}

func (f mcpFleet) NewSession(ctx context.Context, req api.NewSession) (api.Session, error) {
	return f.c.CreateSession(ctx, req)
}

func (f mcpFleet) Session(ctx context.Context, node, id string) (api.Session, error) {
	return f.c.GetSession(ctx, node, id)
}

func (f mcpFleet) UpdateSession(ctx context.Context, node, id string, p api.SessionPatch) (api.Session, error) {
	return f.c.UpdateSession(ctx, node, id, p)
}

func (f mcpFleet) CloseSession(ctx context.Context, node, id string) (api.Session, error) {
	return f.c.CloseSession(ctx, node, id)
}

func (f mcpFleet) Run(ctx context.Context, node, id string, body api.RunBody) (api.BlockResult, error) {
	return f.c.RunCommand(ctx, node, id, body)
}

func (f mcpFleet) Input(ctx context.Context, node, id, data string) error {
	return f.c.Input(ctx, node, id, data)
}

func (f mcpFleet) Keys(ctx context.Context, node, id string, keys ...string) error {
	return f.c.Keys(ctx, node, id, keys)
}

func (f mcpFleet) Screen(ctx context.Context, node, id string) (api.Screen, error) {
	return f.c.Screen(ctx, node, id)
}

func (f mcpFleet) Block(ctx context.Context, node, id string, n int, q api.BlockQuery) (api.BlockResult, error) {
	return f.c.Block(ctx, node, id, api.BlockRequest{N: n, Offset: q.Offset, Limit: q.Limit, Grep: q.Grep, MaxBytes: q.MaxBytes})
}

func (f mcpFleet) Wait(ctx context.Context, node, id string, q api.WaitQuery) (api.WaitResult, error) {
	return f.c.Wait(ctx, node, id, q.Until, q.After, q.TimeoutMS)
}

func (f mcpFleet) Approval(ctx context.Context, node, id string, waitMS int) (api.Approval, error) {
	return f.c.Approval(ctx, node, id, waitMS)
}

func (f mcpFleet) Fanout(ctx context.Context, req api.FanoutRequest) (api.Fanout, error) {
	return f.c.Fanout(ctx, req)
}

// mcpHandler builds the controller's MCP server and returns /mcp's handler: the
// streamable HTTP transport, behind guard like the API (token, Host and Origin
// checks). Tool calls act with the role of the request's API token (each tool
// needs the role api.Tools gives it), are labelled "mcp:CLIENT@ADDR", and are
// audited with both. MCP sessions end
// when Shutdown starts (their event streams would hold it); tool calls in flight
// get the grace, then end with the controller's context.
func (c *Controller) mcpHandler() http.Handler {
	m := mcpserver.New(mcpFleet{c}, mcpserver.Options{
		Version:   c.cfg.Version,
		Context:   c.ctx,
		Logger:    c.log,
		WithActor: WithActor,
		WithCaller: func(ctx context.Context, principal, role string) context.Context {
			return withCaller(ctx, caller{principal: principal, role: role})
		},
		Audit: func(_ context.Context, rec api.AuditRecord) { c.audits.record(rec) },
	})
	h := m.Handler(mcpserver.HTTPOptions{
		Closing: func() bool { return c.streamCtx.Err() != nil },
		// guard authenticated the request: its token's role is the tool calls' role.
		Caller: func(r *http.Request) (string, string) { who := callerOf(r.Context()); return who.principal, who.role },
	})
	c.reqWG.Add(1)
	context.AfterFunc(c.streamCtx, func() {
		defer c.reqWG.Done()
		m.CloseSessions()
		<-c.ctx.Done()
		m.CloseSessions() // any a request in flight made meanwhile
		m.Close()
	})
	return h
}
