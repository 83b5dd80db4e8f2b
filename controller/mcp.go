package controller

import (
	"context"
	"net/http"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/mcpserver"
)

// MCP at /mcp: the server of package mcpserver over the controller itself.

// The controller is its MCP server's Fleet: the same names as the doors'.
var _ mcpserver.Fleet = (*Controller)(nil)

// mcpHandler builds the controller's MCP server and returns /mcp's handler: the
// streamable HTTP transport, behind guard like the API (token, Host and Origin
// checks). Tool calls act with the role of the request's API token (each tool
// needs the role api.Tools gives it), are labelled "mcp:CLIENT@ADDR", and are
// audited with both. MCP sessions end
// when Shutdown starts (their event streams would hold it); tool calls in flight
// get the grace, then end with the controller's context.
func (c *Controller) mcpHandler() http.Handler {
	m := mcpserver.New(c, mcpserver.Options{
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
