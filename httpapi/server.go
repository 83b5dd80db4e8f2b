// Package httpapi is fleetmux's HTTP front door, a peer of sshd and mcpserver:
// the JSON API under /v1 (DESIGN.md, Controller HTTP API), its output streams and
// attach WebSocket, /mcp mounted from a handler cmd builds, /metrics and /healthz.
// Every route is one row of the route table (routes.go): its pattern, the least
// role it needs and its handler. It drives the fleet through Fleet, which the
// controller satisfies; cmd/fleetmux wires the two.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/netcap"
	"github.com/prometheus/client_golang/prometheus"
)

// Fleet is what the HTTP API does with the fleet (*controller.Controller in
// production). Who acts comes from the context: the API authenticates a request's
// token (Authenticate) and names its caller for the fleet (WithCaller), which
// signs every node request with it. Errors are *api.Error where the user should
// see them.
type Fleet interface {
	// Authenticate checks an API token (the text after "Bearer "; "" when the
	// request has none) and returns its principal and role, or an *api.Error of
	// code unauthorized. remote is the client's address, for the operator's log.
	Authenticate(token, remote string) (principal, role string, err error)
	// WithCaller returns a context in which principal acts with role, labelled
	// actor (the client's label, never trusted).
	WithCaller(ctx context.Context, actor, principal, role string) context.Context
	// Audit records what a request did (or was refused) in the audit log.
	Audit(rec api.AuditRecord)
	// Health says whether the fleet reaches its bus.
	Health(ctx context.Context) api.Health

	Nodes(ctx context.Context) (api.NodeList, error)
	Sessions(ctx context.Context, f api.SessionFilter) (api.SessionList, error)
	NewSession(ctx context.Context, req api.NewSession) (api.Session, error)
	Session(ctx context.Context, node, id string) (api.Session, error)
	UpdateSession(ctx context.Context, node, id string, p api.SessionPatch) (api.Session, error)
	CloseSession(ctx context.Context, node, id string) (api.Session, error)
	// RunRaw runs a command and returns the node's reply (an api.BlockResult) as
	// it came, a JSON object passed on without decoding it.
	RunRaw(ctx context.Context, node, id string, body api.RunBody) (json.RawMessage, error)
	Input(ctx context.Context, node, id, data string) error
	Keys(ctx context.Context, node, id string, keys ...string) error
	Resize(ctx context.Context, node, id string, cols, rows int) (api.Session, error)
	TakeOver(ctx context.Context, node, id string) (api.TakeOver, error)
	Screen(ctx context.Context, node, id string) (api.Screen, error)
	Blocks(ctx context.Context, node, id string) (api.BlockList, error)
	Block(ctx context.Context, node, id string, n int, q api.BlockQuery) (api.BlockResult, error)
	Wait(ctx context.Context, node, id string, q api.WaitQuery) (api.WaitResult, error)
	// Output reads raw output from offset from, at most max bytes.
	Output(ctx context.Context, node, id string, from int64, max int) (api.ReadReply, error)
	// Follow writes the session's output from offset from to w, gap-free, until
	// ctx is done, the session exits (exited, with its exit code when known), the
	// node goes down, or w fails (w's error is returned as it is). It blocks.
	Follow(ctx context.Context, node, id string, from int64, w io.Writer) (exitCode *int, exited bool, err error)
	// Redraw writes to w, in one Write, what an attaching terminal sees first (the
	// session's current screen) and returns the offset live output continues from.
	Redraw(ctx context.Context, node, id string, w io.Writer) (int64, error)
	// Recording writes a session's whole recording to w as one asciicast file in
	// format (api.RecordingV3 or api.RecordingV2); an error before the first write
	// leaves w untouched.
	Recording(ctx context.Context, node, id string, format int, w io.Writer) error
	// WatchFleet calls fn with each change of a session, approval or agent on any
	// node (its kind, node and id; never its content) until stop is called; fn
	// must not block.
	WatchFleet(fn func(kind, node, id string)) (stop func(), err error)
	// WatchBlocks calls fn with each block event of the session from now until
	// stop is called; fn must not block.
	WatchBlocks(node, id string, fn func(api.BlockEvent)) (stop func(), err error)
	// AttachInput types a person's keystrokes into a session (an attach's input).
	AttachInput(ctx context.Context, node, id, data string) error
	Fanout(ctx context.Context, req api.FanoutRequest) (api.Fanout, error)
	Approvals(ctx context.Context, node, state string) (api.ApprovalList, error)
	Approval(ctx context.Context, node, id string, waitMS int) (api.Approval, error)
	Decide(ctx context.Context, node, id string, b api.DecideBody) (api.Approval, error)
	Tokens(ctx context.Context) (api.TokenList, error)
	CreateToken(ctx context.Context, req api.TokenRequest) (api.NewToken, error)
	RevokeToken(ctx context.Context, name string) (api.Token, error)
	Policy(ctx context.Context) (api.PolicyInfo, error)
	SetPolicy(ctx context.Context, doc []byte) (api.PolicyInfo, error)
	DeletePolicy(ctx context.Context) (api.PolicyInfo, error)
	Secrets(ctx context.Context, node string) (api.SecretList, error)
	SetSecret(ctx context.Context, node, name, value string) (api.SecretInfo, error)
	DeleteSecret(ctx context.Context, node, name string) (api.SecretInfo, error)

	// Agents (DESIGN "Agents"); node "" lists every node's.
	Agents(ctx context.Context, node string) (api.AgentList, error)
	SpawnAgent(ctx context.Context, req api.SpawnRequest) (api.Agent, error)
	Agent(ctx context.Context, node, id string) (api.Agent, error)
	KillAgent(ctx context.Context, node, id string) (api.Agent, error)
	SendAgent(ctx context.Context, node, id, text string) (api.Agent, error)
	InterruptAgent(ctx context.Context, node, id string) (api.Agent, error)
	WaitAgent(ctx context.Context, node, id string, states []string, timeoutMS int) (api.AgentWaitReply, error)
	AgentOutput(ctx context.Context, node, id string, cursor int64, maxBytes int) (api.AgentOutput, error)

	// Exec (DESIGN "Exec"): one node's, or a selector's nodes' (ExecFanout).
	Exec(ctx context.Context, req api.ExecRequest) (api.ExecResult, error)
	ExecFanout(ctx context.Context, req api.ExecRequest) (api.ExecFanout, error)
	ExecGet(ctx context.Context, node, id string, maxBytes int) (api.ExecResult, error)
	ExecWait(ctx context.Context, node, id string, timeoutMS, maxBytes int) (api.ExecResult, error)
	ExecOutput(ctx context.Context, node, id, stream string, from int64, max int) (api.ExecOutput, error)
	ExecKill(ctx context.Context, node, id string) (api.ExecResult, error)

	// Digest is what happened since a cursor, within a token budget (DESIGN "Digest").
	Digest(ctx context.Context, q api.DigestQuery) (api.Digest, error)
}

// MCPServer is the MCP server mounted at /mcp, as Server ends it: first its
// sessions (their event streams would hold Shutdown), then, after the grace, the
// server.
type MCPServer interface {
	CloseSessions()
	Close()
}

// MCPOptions are what Server gives Config.MCP to build /mcp's handler with.
type MCPOptions struct {
	// Context is done when the server's grace has passed (Shutdown) or at Close:
	// tool calls in flight end with it.
	Context context.Context
	// Closing reports whether the server is shutting down (new MCP sessions and
	// event streams are refused then).
	Closing func() bool
	// Caller names the principal and role of a request the API authenticated (the
	// tool calls' role).
	Caller func(r *http.Request) (principal, role string)
}

// Defaults.
const (
	DefaultListen = "127.0.0.1:7070"
	// headerTimeout bounds the wait for a request's header, on a new connection
	// too; idleTimeout a kept-alive connection's wait for its next request.
	headerTimeout = 5 * time.Second
	idleTimeout   = 30 * time.Second
)

// Config configures New.
type Config struct {
	// Listen is the API's address. Default DefaultListen (loopback).
	Listen string
	// Fleet is what the API drives. Required.
	Fleet Fleet
	// MCP, when set, builds the handler of /mcp (MCP over streamable HTTP, behind
	// the same token, Host and Origin checks as the API) and the server behind it.
	// nil: /mcp answers unavailable.
	MCP func(o MCPOptions) (http.Handler, MCPServer)
	// Registry receives the API's request metrics and is what /metrics serves (the
	// controller's metrics are registered on it too). Default a new registry.
	Registry *prometheus.Registry
	// Logger receives the operator's log. Default slog.Default().
	Logger *slog.Logger
}

// Errors callers match on.
var (
	ErrConfig = errors.New("httpapi: bad config")
	ErrClosed = errors.New("httpapi: closed")
)

// Server is the HTTP API. Create it with New, then Start; Shutdown or Close stop
// it.
type Server struct {
	cfg     Config
	log     *slog.Logger
	fleet   Fleet
	metrics *metrics
	handler http.Handler
	roles   map[string]string // the route table's patterns and roles (guard)
	promH   http.Handler      // /metrics
	mcpH    http.Handler      // /mcp; nil: none
	ui      *consoleStore     // the console's sign-ins and one-time links

	// ctx is cancelled by Close and Shutdown (after their grace): long requests,
	// streams and tool calls end with it.
	ctx    context.Context
	cancel context.CancelFunc
	// streamCtx (a child of ctx) ends attach and follow streams and MCP sessions
	// at Shutdown's start: they never finish on their own.
	streamCtx    context.Context
	streamCancel context.CancelFunc

	mu      sync.Mutex // guards srv, ln, started, closed
	srv     *http.Server
	ln      net.Listener
	started bool
	closed  bool
	serveWG sync.WaitGroup // the HTTP serve goroutine
	reqWG   sync.WaitGroup // what requests leave running (hijacked connections, MCP's close)

	redraws *redraws    // terminal views' redraws, shared (view.go)
	streams streamCount // open streams by principal (streamcap.go)
}

// New validates cfg and builds the API. It does not listen yet.
func New(cfg Config) (*Server, error) {
	if cfg.Fleet == nil {
		return nil, fmt.Errorf("%w: no fleet", ErrConfig)
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
		return nil, fmt.Errorf("%w: listen %q: %w", ErrConfig, cfg.Listen, err)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, fleet: cfg.Fleet, ui: newConsoleStore(), redraws: newRedraws()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.streamCtx, s.streamCancel = context.WithCancel(s.ctx)
	var err error
	if s.metrics, err = newMetrics(cfg.Registry); err != nil {
		return nil, fmt.Errorf("httpapi: metrics: %w", err)
	}
	if s.handler, err = s.build(); err != nil {
		return nil, err
	}
	return s, nil
}

// Handler is the API (what Start serves), for embedding in another server.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on cfg.Listen and serves the API on a goroutine of its own. It
// does not block.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.started {
		return errors.New("httpapi: already started")
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("httpapi: listen: %w", err)
	}
	// Every connection costs a descriptor before it authenticates: the listener
	// caps them (in all and per address; an idle one gives way to a new one), and
	// a connection that sends no request is closed within seconds.
	capped := netcap.New(ln, netcap.Config{Name: "http", Logger: s.log})
	s.ln = capped
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		ConnState: func(nc net.Conn, st http.ConnState) {
			capped.Idle(nc, st == http.StateNew || st == http.StateIdle)
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.started = true
	s.serveWG.Add(1)
	go func() {
		defer s.serveWG.Done()
		if err := s.srv.Serve(capped); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http serve", "err", err)
		}
	}()
	s.log.Info("HTTP API serving", "addr", ln.Addr().String())
	return nil
}

// Addr is the address the API listens on (after Start), e.g. 127.0.0.1:7070.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Serve starts the API and serves until ctx is done, then shuts down with a
// grace of 5 s for requests in flight.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// Shutdown stops accepting requests and waits for those in flight until ctx is
// done; then it cancels what still runs (streams, long runs: the commands keep
// running on their nodes) and waits for every goroutine of the server.
// It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	srv := s.srv
	s.mu.Unlock()
	var err error
	if srv != nil && !already {
		// Streams never finish on their own: end them now; plain requests get the grace.
		done := make(chan struct{})
		go func() {
			defer close(done)
			err = srv.Shutdown(ctx)
		}()
		s.streamCancel()
		<-done
		if err != nil {
			srv.Close()
		}
	}
	s.streamCancel()
	s.cancel()
	s.serveWG.Wait()
	s.reqWG.Wait()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = nil // requests cut short at the deadline, as documented
	}
	return err
}

// Close stops the server at once: requests in flight are cancelled.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return s.Shutdown(ctx)
}
