// Package mcpserver is fleetmux's MCP (Model Context Protocol) server for AI agents
// (DESIGN.md, "MCP server"): the tools (tools.go, handlers.go), the sessions as
// resources with update notifications (resources.go), and results shaped for a
// model (format.go, errors.go), over a Fleet.
//
// The Fleet is defined here and is all the server needs: the controller serves MCP
// at /mcp over itself (in-process, through Handler), and `fleetmux mcp` serves it
// over stdio with the HTTP client of a controller (client.Client is a Fleet). This
// package imports api and the MCP SDK only.
package mcpserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Fleet is what the MCP server does with the fleet. Its methods are those of the
// controller's HTTP API, with its types. Errors are *api.Error where the model
// should see them (Options.Unreachable words the others).
type Fleet interface {
	Nodes(ctx context.Context) (api.NodeList, error)
	// Sessions lists the sessions of one node (f.Node, "" for all) whose labels
	// (over their node's) carry every label in f.Labels.
	Sessions(ctx context.Context, f api.SessionFilter) (api.SessionList, error)
	NewSession(ctx context.Context, req api.NewSession) (api.Session, error)
	Session(ctx context.Context, node, id string) (api.Session, error)
	UpdateSession(ctx context.Context, node, id string, p api.SessionPatch) (api.Session, error)
	CloseSession(ctx context.Context, node, id string) (api.Session, error)
	Run(ctx context.Context, node, id string, body api.RunBody) (api.BlockResult, error)
	Input(ctx context.Context, node, id, data string) error
	Keys(ctx context.Context, node, id string, keys ...string) error
	Screen(ctx context.Context, node, id string) (api.Screen, error)
	// Block reads block n with its text.
	Block(ctx context.Context, node, id string, n int, q api.BlockQuery) (api.BlockResult, error)
	// Wait waits until the session is idle, waiting_input, exited, or has output
	// past q.After (api.UntilOutput), for at most q.TimeoutMS, and returns it with
	// its last block.
	Wait(ctx context.Context, node, id string, q api.WaitQuery) (api.WaitResult, error)
	Fanout(ctx context.Context, req api.FanoutRequest) (api.Fanout, error)
	// Approval reads an approval of node (a held command); with waitMS > 0 it first
	// waits, up to waitMS, until the approval is done (decided, and an approved
	// run's block finished).
	Approval(ctx context.Context, node, id string, waitMS int) (api.Approval, error)
	// The agents (agents.go).
	AgentFleet
	// One-shot processes (exec.go).
	ExecFleet
	// The catch-up digest (digest.go).
	DigestFleet
}

// DefaultTextBytes is the default text budget of one tool result.
const DefaultTextBytes = 8 << 10

// maxTextBytes bounds the budget a tool call may ask for.
const maxTextBytes = 1 << 20

// Options configures a Server. The zero value is usable.
type Options struct {
	// Version is the server's version in the MCP handshake. Default api.DevVersion.
	Version string
	// MaxTextBytes is the default text budget of a result (head + tail of the
	// output). Default DefaultTextBytes; at most 1 MiB.
	MaxTextBytes int
	// Context, when done, cancels tool calls in flight and stops the watchers of
	// resource subscriptions. Default: never done (Serve: its ctx).
	Context context.Context
	// Actor names who makes a request; it goes into the audit records and, through
	// WithActor, into the Fleet's calls. Default "mcp" with the client's name and,
	// over HTTP (Handler), its address: "mcp:claude-code@127.0.0.1".
	Actor func(req mcp.Request) string
	// WithActor, when set, gives the context of every Fleet call the actor (the
	// controller records it in the nodes' audit). Default: the context as is.
	WithActor func(ctx context.Context, actor string) context.Context
	// Role, when set, is the role every call acts with where the transport names
	// none (stdio: `fleetmux mcp` with its token's role): a tool call needs the role
	// api.Tools gives the tool. Empty: tools are not checked here (the Fleet checks:
	// the controller's HTTP API refuses what the token's role may not do). Over
	// HTTP, HTTPOptions.Caller names the role of each request instead.
	Role string
	// WithCaller, when set, gives the context of every Fleet call who acts: the
	// authenticated principal (e.g. "token:NAME") and role, as the transport named
	// them (HTTPOptions.Caller; Role). The controller signs its node requests so.
	WithCaller func(ctx context.Context, principal, role string) context.Context
	// Audit, when set, receives a record of every tool call that changes something
	// (create, run, input, keys, set info, close, fan-out), with its result.
	Audit func(ctx context.Context, rec api.AuditRecord)
	// Unreachable, when set, words for the model an error of the Fleet that is
	// neither an *api.Error nor a cancellation (a Fleet over the network: the
	// controller could not be reached). Default: "internal error: ERR".
	Unreachable func(err error) string
	// Logger receives the server's log. Default: discarded.
	Logger *slog.Logger
}

// Serve serves the fleetmux MCP server over f on t (e.g. &mcp.StdioTransport{})
// until the client leaves or ctx is done, and returns once everything it started
// (the watchers of resource subscriptions) has stopped. The client leaving is not
// an error.
func Serve(ctx context.Context, f Fleet, opts Options, t mcp.Transport) error {
	if opts.Context == nil {
		opts.Context = ctx
	}
	s := New(f, opts)
	defer s.Close()
	return s.Run(ctx, t)
}

// Server is the MCP server over a Fleet: the SDK's server with the tools
// (list_nodes, list_sessions, create_session, run_command, wait_for, send_input,
// send_keys, read_screen, read_block, set_session_info, close_session,
// fanout_run) and the sessions as resources (fleetmux://NODE/ID/screen,
// fleetmux://NODE/ID/blocks/N), and the watchers that notify subscribers of
// resources. Close stops the watchers.
type Server struct {
	f        Fleet
	opts     Options
	srv      *mcp.Server
	log      *slog.Logger
	maxText  int
	ctx      context.Context // opts.Context, cancelled by Close
	cancel   context.CancelFunc
	mu       sync.Mutex // guards closed, watches
	closed   bool
	watches  map[string]*watch // by resource URI
	watchers sync.WaitGroup
}

// instructions tell a model how to use the server.
const instructions = `fleetmux gives you persistent shells ("sessions") on a fleet of machines ("nodes"). A session is named by node and session (e.g. node "web-1", session "s3"); it keeps its cwd, environment and history between calls.
Typical flow: list_sessions (reuse a session whose title fits) or create_session with a title and description; run_command runs one command and returns its output, exit code, duration and cwd. If the result says state running, call wait_for; if it says waiting_input, answer with send_input. Output over the budget is cut in the middle: read_block pages through it (offset/limit lines, grep). A full-screen program (vim, top, less) reads keys, not lines: drive it with send_keys and look at it with read_screen (run_command refuses to type into it). fanout_run runs one command on many nodes at once.
Resources: fleetmux://NODE/SESSION/screen and fleetmux://NODE/SESSION/blocks/N (subscribe for updates).`

// New returns the MCP server over f. It starts nothing: Run serves one client,
// Handler many over HTTP.
func New(f Fleet, opts Options) *Server {
	if opts.Version == "" {
		opts.Version = api.DevVersion
	}
	if opts.MaxTextBytes <= 0 {
		opts.MaxTextBytes = DefaultTextBytes
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Server{f: f, opts: opts, log: opts.Logger, maxText: min(opts.MaxTextBytes, maxTextBytes), watches: map[string]*watch{}}
	m.ctx, m.cancel = context.WithCancel(opts.Context)
	m.srv = mcp.NewServer(&mcp.Implementation{Name: "fleetmux", Title: "fleetmux", Version: opts.Version}, &mcp.ServerOptions{
		Instructions:       instructions,
		SubscribeHandler:   m.subscribe,
		UnsubscribeHandler: m.unsubscribe,
		Capabilities:       &mcp.ServerCapabilities{}, // no logging: tools, resources (inferred)
	})
	m.addTools()
	m.addAgentTools()
	m.addExecTool()
	m.addDigestTool()
	m.addResources()
	return m
}

// Run serves one client on t until it leaves (nil) or ctx is done (nil).
func (m *Server) Run(ctx context.Context, t mcp.Transport) error {
	err := m.srv.Run(ctx, t)
	if ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil // the client left, or we were told to stop
	}
	return err
}

// Close stops the watchers of resource subscriptions and waits for them.
// Idempotent.
func (m *Server) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.watchers.Wait()
}

// CloseSessions closes every client session of the server (each waits for its
// requests in flight), in parallel, and returns when all are closed.
func (m *Server) CloseSessions() {
	var wg sync.WaitGroup
	for ss := range m.srv.Sessions() {
		wg.Add(1)
		go func() { // owned by this call: joined below
			defer wg.Done()
			ss.Close()
		}()
	}
	wg.Wait()
}

// HTTPOptions configures Handler. The zero value is usable.
type HTTPOptions struct {
	// SessionTimeout ends client sessions that made no request for this long.
	// Default 30 minutes.
	SessionTimeout time.Duration
	// MaxBodyBytes bounds a request's body. Default api.MaxBodyBytes.
	MaxBodyBytes int64
	// Closing, when set and true, refuses new client sessions (while shutting
	// down).
	Closing func() bool
	// Caller, when set, names who sends a request (authenticated in front of the
	// handler: the controller's API token): its principal and role. The tool calls
	// of that request act so, and need the role api.Tools gives their tool; an
	// empty role may call no tool. Unset: Options.Role.
	Caller func(r *http.Request) (principal, role string)
}

// defaultSessionTimeout ends client sessions over HTTP that made no request for
// this long.
const defaultSessionTimeout = 30 * time.Minute

// remoteHeader carries the client's address from Handler to the tool calls (the
// SDK gives them the request's header, not the request); principalHeader and
// roleHeader carry the caller (HTTPOptions.Caller). Whatever a client sends in
// them is overwritten.
const (
	remoteHeader    = "Fleetmux-Mcp-Remote"
	principalHeader = "Fleetmux-Mcp-Principal"
	roleHeader      = "Fleetmux-Mcp-Role"
)

// noRole is roleHeader's value for a caller without a role: it may call no tool.
const noRole = "-"

// Handler serves MCP over streamable HTTP (at /mcp on the controller). It checks
// no token, Host or Origin: mount it behind what does (the controller's guard).
// Tool calls name the client's address in their actor.
func (m *Server) Handler(o HTTPOptions) http.Handler {
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = defaultSessionTimeout
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = api.MaxBodyBytes
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		if o.Closing != nil && o.Closing() {
			return nil // shutting down: no new sessions
		}
		return m.srv
	}, &mcp.StreamableHTTPOptions{
		SessionTimeout:      o.SessionTimeout,
		MaxRequestBodyBytes: o.MaxBodyBytes,
		// The guard in front refuses non-loopback Host names without a token, and the
		// SDK's check would refuse them with one too (a proxy on this host).
		DisableLocalhostProtection: true,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set(remoteHeader, hostOnly(r.RemoteAddr))
		r.Header.Del(principalHeader)
		r.Header.Del(roleHeader)
		if o.Caller != nil {
			principal, role := o.Caller(r)
			if role == "" {
				role = noRole
			}
			r.Header.Set(principalHeader, principal)
			r.Header.Set(roleHeader, role)
		}
		h.ServeHTTP(w, r)
	})
}

// hostOnly is the host of a host:port (the whole string when it has no port).
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

type callKey struct{}

// call is who makes a request: the actor (a label for the audit), the
// authenticated principal and role, and whether the role is to be checked here.
type call struct {
	actor, principal, role string
	checked                bool
}

// callCtx is the context of one request: cancelled with opts.Context too, and
// naming who calls.
func (m *Server) callCtx(ctx context.Context, req mcp.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.ctx, cancel)
	var who call
	if m.opts.Actor != nil {
		who.actor = m.opts.Actor(req)
	} else {
		who.actor = DefaultActor(req)
	}
	if ex := req.GetExtra(); ex != nil && ex.Header != nil && ex.Header.Get(roleHeader) != "" {
		who.principal, who.role, who.checked = ex.Header.Get(principalHeader), ex.Header.Get(roleHeader), true
		if who.role == noRole {
			who.role = ""
		}
	} else if m.opts.Role != "" {
		who.role, who.checked = m.opts.Role, true
	}
	ctx = context.WithValue(ctx, callKey{}, who)
	if m.opts.WithActor != nil {
		ctx = m.opts.WithActor(ctx, who.actor)
	}
	if m.opts.WithCaller != nil {
		ctx = m.opts.WithCaller(ctx, who.principal, who.role)
	}
	return ctx, func() { stop(); cancel() }
}

// callOf is who callCtx named in ctx.
func callOf(ctx context.Context) call {
	c, _ := ctx.Value(callKey{}).(call)
	return c
}

// actorOf is the actor callCtx named in ctx.
func actorOf(ctx context.Context) string { return callOf(ctx).actor }

// allowed returns a tool error unless the caller of ctx may call tool
// (api.Tools; a tool missing there is allowed to nobody).
func allowed(ctx context.Context, tool string) error {
	who := callOf(ctx)
	if !who.checked {
		return nil
	}
	need, ok := api.Tools[tool]
	if !ok {
		return &toolError{msg: fmt.Sprintf("%s has no role in the access table: refused", tool), code: api.CodeForbidden}
	}
	if !api.RoleAtLeast(who.role, need) {
		who.role = cmp.Or(who.role, "no role")
		return &toolError{msg: fmt.Sprintf("%s needs the %s role; you act as %s with %s (ask an admin for a token with more rights)", tool, need, cmp.Or(who.principal, "this client"), who.role), code: api.CodeForbidden}
	}
	return nil
}

// DefaultActor is "mcp", with the client's name (":NAME") and, over HTTP, its
// address ("@HOST") when known.
func DefaultActor(req mcp.Request) string {
	who := "mcp"
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
		if ip := ss.InitializeParams(); ip != nil && ip.ClientInfo != nil && ip.ClientInfo.Name != "" {
			name := strings.Map(func(r rune) rune {
				if r <= ' ' || r == 0x7f || r == '@' {
					return -1
				}
				return r
			}, ip.ClientInfo.Name)
			if len(name) > 32 {
				name = name[:32]
			}
			if name != "" {
				who += ":" + name
			}
		}
	}
	if ex := req.GetExtra(); ex != nil && ex.Header != nil {
		if host := ex.Header.Get(remoteHeader); host != "" {
			who += "@" + host
		}
	}
	return who
}

// budget is the text budget of a call that asked for max (0: the default).
func (m *Server) budget(max int) int {
	if max <= 0 {
		return m.maxText
	}
	return min(max, maxTextBytes)
}
