package httpapi

import (
	"context"
	"net/http"

	"github.com/fleetmux/fleetmux/api"
)

// MCP at /mcp: the handler Config.MCP builds (cmd builds it from package
// mcpserver over the fleet), behind guard like the API (token, Host and Origin
// checks). Tool calls act with the role of the request's API token (Caller). MCP
// sessions end when Shutdown starts (their event streams would hold it); tool
// calls in flight get the grace, then end with the server's context.

// errNoMCP answers /mcp on a server built without an MCP server.
var errNoMCP = api.Errorf(api.CodeUnavailable, "this controller serves no MCP server")

// mountMCP builds /mcp's handler (nil without Config.MCP) and registers the
// close of its server on the server's shutdown.
func (s *Server) mountMCP() http.Handler {
	if s.cfg.MCP == nil {
		return nil
	}
	h, m := s.cfg.MCP(MCPOptions{
		Context: s.ctx,
		Closing: func() bool { return s.streamCtx.Err() != nil },
		Caller:  Caller,
	})
	s.reqWG.Add(1)
	context.AfterFunc(s.streamCtx, func() {
		defer s.reqWG.Done()
		m.CloseSessions()
		<-s.ctx.Done()
		m.CloseSessions() // any a request in flight made meanwhile
		m.Close()
	})
	return h
}

func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) {
	if s.mcpH == nil {
		s.reply(w, r, nil, errNoMCP)
		return
	}
	s.mcpH.ServeHTTP(w, r)
}
