package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP server (DESIGN.md, "MCP server"): the tools of mcp_tools.go and the
// sessions as resources, over any Fleet. `fleetmux mcp` serves it over stdio with a
// Fleet that is the HTTP client of a controller; the controller serves it at /mcp
// (streamable HTTP) over itself.

// DefaultMCPTextBytes is the default text budget of one tool result.
const DefaultMCPTextBytes = 8 << 10

// maxMCPTextBytes bounds the budget a tool call may ask for.
const maxMCPTextBytes = 1 << 20

// MCPOptions configures ServeMCP. The zero value is usable.
type MCPOptions struct {
	// Version is the server's version in the MCP handshake. Default Version.
	Version string
	// MaxTextBytes is the default text budget of a result (head + tail of the
	// output). Default DefaultMCPTextBytes.
	MaxTextBytes int
	// Context, when done, cancels tool calls in flight and stops the watchers of
	// resource subscriptions. Default: never done.
	Context context.Context
	// Actor names who makes a request; Fleet calls carry it (WithActor) into the
	// audit records. Default "mcp" with the client's name ("mcp:claude-code").
	Actor func(req mcp.Request) string
	// Audit, when set, receives a record of every tool call that changes something
	// (create, run, input, keys, set info, close, fan-out), with its result.
	Audit func(ctx context.Context, rec api.AuditRecord)
	// Logger receives the server's log. Default: discarded.
	Logger *slog.Logger
}

// ServeMCP serves the fleetmux MCP server over f on t (e.g. &mcp.StdioTransport{})
// until the client leaves or ctx is done, and returns once everything it started
// (the watchers of resource subscriptions) has stopped. The server has the tools
// (list_nodes, list_sessions, create_session, run_command, wait_for, send_input,
// send_keys, read_screen, read_block, set_session_info, close_session,
// fanout_run) and the sessions as resources (fleetmux://NODE/ID/screen,
// fleetmux://NODE/ID/blocks/N), with update notifications for subscribers.
func ServeMCP(ctx context.Context, f Fleet, opts MCPOptions, t mcp.Transport) error {
	if opts.Context == nil {
		opts.Context = ctx
	}
	m := newMCP(f, opts)
	defer m.close()
	err := m.srv.Run(ctx, t)
	if ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil // the client left, or we were told to stop
	}
	return err
}

// mcpServer is the MCP server with what it runs besides the SDK's server: the
// watchers that notify resource subscribers.
type mcpServer struct {
	f        Fleet
	opts     MCPOptions
	srv      *mcp.Server
	log      *slog.Logger
	maxText  int
	ctx      context.Context // opts.Context, cancelled by close
	cancel   context.CancelFunc
	mu       sync.Mutex // guards closed, watches
	closed   bool
	watches  map[string]*watch // by resource URI
	watchers sync.WaitGroup
}

// mcpInstructions tell a model how to use the server.
const mcpInstructions = `fleetmux gives you persistent shells ("sessions") on a fleet of machines ("nodes"). A session is named by node and session (e.g. node "web-1", session "s3"); it keeps its cwd, environment and history between calls.
Typical flow: list_sessions (reuse a session whose title fits) or create_session with a title and description; run_command runs one command and returns its output, exit code, duration and cwd. If the result says "running", call wait_for; if it says "waiting_input", answer with send_input. Output over the budget is cut in the middle: read_block pages through it (offset/limit lines, grep). read_screen shows full-screen programs (vim, top, less). fanout_run runs one command on many nodes at once.
Resources: fleetmux://NODE/SESSION/screen and fleetmux://NODE/SESSION/blocks/N (subscribe for updates).`

func newMCP(f Fleet, opts MCPOptions) *mcpServer {
	if opts.Version == "" {
		opts.Version = Version
	}
	if opts.MaxTextBytes <= 0 {
		opts.MaxTextBytes = DefaultMCPTextBytes
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &mcpServer{f: f, opts: opts, log: opts.Logger, maxText: min(opts.MaxTextBytes, maxMCPTextBytes), watches: map[string]*watch{}}
	m.ctx, m.cancel = context.WithCancel(opts.Context)
	m.srv = mcp.NewServer(&mcp.Implementation{Name: "fleetmux", Title: "fleetmux", Version: opts.Version}, &mcp.ServerOptions{
		Instructions:       mcpInstructions,
		SubscribeHandler:   m.subscribe,
		UnsubscribeHandler: m.unsubscribe,
		Capabilities:       &mcp.ServerCapabilities{}, // no logging: tools, resources (inferred)
	})
	m.addTools()
	m.addResources()
	return m
}

// close stops the watchers and waits for them. Idempotent.
func (m *mcpServer) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.watchers.Wait()
}

// closeSessions closes every session of the server (each waits for its requests in
// flight), in parallel, and returns when all are closed.
func (m *mcpServer) closeSessions() {
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

// callCtx is the context of one request: cancelled with opts.Context too, and
// naming its actor.
func (m *mcpServer) callCtx(ctx context.Context, req mcp.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(m.ctx, cancel)
	actor := ""
	if m.opts.Actor != nil {
		actor = m.opts.Actor(req)
	} else {
		actor = mcpActor(req, "")
	}
	return WithActor(ctx, actor), func() { stop(); cancel() }
}

// mcpActor is "mcp", with the client's name (":NAME") and host ("@HOST") when known.
func mcpActor(req mcp.Request, host string) string {
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
	if host != "" {
		who += "@" + host
	}
	return who
}

// budget is the text budget of a call that asked for max (0: the default).
func (m *mcpServer) budget(max int) int {
	if max <= 0 {
		return m.maxText
	}
	return min(max, maxMCPTextBytes)
}

// Resources.

// resourceRef is a parsed resource URI.
type resourceRef struct {
	node, id string
	n        int // block number; 0: the screen
}

const resourceScheme = "fleetmux://"

func (r resourceRef) uri() string {
	if r.n == 0 {
		return resourceScheme + r.node + "/" + r.id + "/screen"
	}
	return resourceScheme + r.node + "/" + r.id + "/blocks/" + strconv.Itoa(r.n)
}

// parseResource parses fleetmux://NODE/ID/screen and fleetmux://NODE/ID/blocks/N.
func parseResource(uri string) (resourceRef, error) {
	rest, ok := strings.CutPrefix(uri, resourceScheme)
	if !ok {
		return resourceRef{}, fmt.Errorf("resource %q: want fleetmux://NODE/SESSION/screen or fleetmux://NODE/SESSION/blocks/N", uri)
	}
	parts := strings.Split(rest, "/")
	var r resourceRef
	switch {
	case len(parts) == 3 && parts[2] == "screen":
	case len(parts) == 4 && parts[2] == "blocks":
		n, err := strconv.Atoi(parts[3])
		if err != nil || n < 1 || strconv.Itoa(n) != parts[3] {
			return r, fmt.Errorf("resource %q: the block number must be an integer from 1", uri)
		}
		r.n = n
	default:
		return r, fmt.Errorf("resource %q: want fleetmux://NODE/SESSION/screen or fleetmux://NODE/SESSION/blocks/N", uri)
	}
	r.node, r.id = parts[0], parts[1]
	if api.ValidName(r.node) != nil || api.ValidName(r.id) != nil {
		return r, fmt.Errorf("resource %q: bad node or session name", uri)
	}
	return r, nil
}

func (m *mcpServer) addResources() {
	m.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "session-screen",
		Title:       "Session screen",
		URITemplate: resourceScheme + "{node}/{session}/screen",
		Description: "The current screen of a session as text, with a header line (size, cursor, alternate screen, waiting for input). Subscribe to be told when it changes.",
		MIMEType:    "text/plain",
	}, m.readResource)
	m.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "session-block",
		Title:       "Session block",
		URITemplate: resourceScheme + "{node}/{session}/blocks/{n}",
		Description: "Block n (the n-th command) of a session: a header line (exit code, duration, cwd, state) then its output within the text budget. Subscribe to be told while it runs and when it ends.",
		MIMEType:    "text/plain",
	}, m.readResource)
	// resources/list lists the sessions (their screens and last blocks) as they are
	// now; the SDK lists only fixed resources.
	m.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "resources/list" {
				return m.listResources(ctx, req)
			}
			return next(ctx, method, req)
		}
	})
}

func (m *mcpServer) listResources(ctx context.Context, req mcp.Request) (mcp.Result, error) {
	ctx, done := m.callCtx(ctx, req)
	defer done()
	list, err := m.f.ListSessions(ctx, "", nil)
	if err != nil {
		return nil, explain(err, "", "")
	}
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	for _, s := range list.Sessions {
		title := s.Title
		if title == "" {
			title = addr(s.Node, s.ID)
		}
		out.Resources = append(out.Resources, &mcp.Resource{
			URI: resourceRef{node: s.Node, id: s.ID}.uri(), Name: addr(s.Node, s.ID) + " screen",
			Title: title + " (screen)", Description: sessionLine(s), MIMEType: "text/plain",
		})
		if s.Blocks > 0 {
			out.Resources = append(out.Resources, &mcp.Resource{
				URI: resourceRef{node: s.Node, id: s.ID, n: s.Blocks}.uri(), Name: fmt.Sprintf("%s block %d", addr(s.Node, s.ID), s.Blocks),
				Title: fmt.Sprintf("%s (block %d)", title, s.Blocks), Description: "the last command of " + addr(s.Node, s.ID) + " and its output", MIMEType: "text/plain",
			})
		}
	}
	return out, nil
}

func (m *mcpServer) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ctx, done := m.callCtx(ctx, req)
	defer done()
	uri := req.Params.URI
	r, err := parseResource(uri)
	if err != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	var text string
	if r.n == 0 {
		sc, err := m.f.Screen(ctx, r.node, r.id)
		if err != nil {
			return nil, m.resourceErr(uri, err, r)
		}
		text = screenView{node: r.node, id: r.id, sc: sc}.text()
	} else {
		br, err := m.f.Block(ctx, r.node, r.id, api.BlockRequest{N: r.n, MaxBytes: m.maxText})
		if err != nil {
			return nil, m.resourceErr(uri, err, r)
		}
		text = blockView{node: r.node, id: r.id, br: br, hasBlock: true, budget: m.maxText, now: time.Now()}.text()
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: text}}}, nil
}

func (m *mcpServer) resourceErr(uri string, err error, r resourceRef) error {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		return mcp.ResourceNotFoundError(uri)
	}
	return explain(err, r.node, r.id)
}

// Subscriptions: one watcher per subscribed URI waits for the session's output on
// the Fleet and notifies the subscribers when it moves.

type watch struct {
	subs map[*mcp.ServerSession]bool
	stop context.CancelFunc
}

// maxMCPWatches bounds the resources watched at once for subscribers (each
// watcher is a goroutine with a long poll on its session's node).
const maxMCPWatches = 256

// notifyEvery bounds how often one resource's subscribers are notified.
const notifyEvery = 200 * time.Millisecond

func (m *mcpServer) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	r, err := parseResource(req.Params.URI)
	if err != nil {
		return err
	}
	ctx, done := m.callCtx(ctx, req)
	defer done()
	s, err := m.f.GetSession(ctx, r.node, r.id)
	if err != nil {
		return explain(err, r.node, r.id)
	}
	if r.n > 0 && (s.Blocks > r.n || s.Blocks == r.n && s.State == stateIdle) || s.State == stateExited {
		return nil // it will not change: nothing to watch
	}
	uri := r.uri()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("the server is shutting down")
	}
	w := m.watches[uri]
	if w == nil && len(m.watches) >= maxMCPWatches {
		return fmt.Errorf("too many resource subscriptions (%d): unsubscribe from some first", maxMCPWatches)
	}
	if w == nil {
		wctx, stop := context.WithCancel(m.ctx)
		w = &watch{subs: map[*mcp.ServerSession]bool{}, stop: stop}
		m.watches[uri] = w
		m.watchers.Add(1)
		go m.watch(wctx, r, w, s.OutputOffset) // owned by m: close waits for it
	}
	w.subs[req.Session] = true
	return nil
}

func (m *mcpServer) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	r, err := parseResource(req.Params.URI)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.watches[r.uri()]; w != nil {
		delete(w.subs, req.Session)
		if len(w.subs) == 0 {
			w.stop()
			delete(m.watches, r.uri())
		}
	}
	return nil
}

// subscribed drops the subscribers of w that have left and says whether any remain.
func (m *mcpServer) subscribed(w *watch) bool {
	live := map[*mcp.ServerSession]bool{}
	for ss := range m.srv.Sessions() {
		live[ss] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ss := range w.subs {
		if !live[ss] {
			delete(w.subs, ss)
		}
	}
	return len(w.subs) > 0
}

// watch notifies r's subscribers when the session's output moves past after, until
// they all leave, the session exits or is gone, or (a block) the block is done.
func (m *mcpServer) watch(ctx context.Context, r resourceRef, w *watch, after int64) {
	defer m.watchers.Done()
	uri := r.uri()
	defer func() {
		m.mu.Lock()
		if m.watches[uri] == w {
			delete(m.watches, uri)
		}
		m.mu.Unlock()
		w.stop()
	}()
	notify := func() {
		if err := m.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
			m.log.Debug("mcp resource update", "uri", uri, "err", err)
		}
	}
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil && m.subscribed(w) {
		wr, err := m.f.Wait(ctx, r.node, r.id, "output", after, 25000)
		if err != nil {
			if gone(err) {
				notify()
				return
			}
			if !pause(time.Second) {
				return
			}
			continue
		}
		s := wr.Session
		if s.OutputOffset > after {
			after = s.OutputOffset
			notify()
		}
		if s.State == stateExited || r.n > 0 && s.Blocks > r.n {
			return // nothing more will change
		}
		if r.n > 0 && s.Blocks == r.n && s.State == stateIdle {
			return // the block is done and the shell back at its prompt
		}
		if !pause(notifyEvery) {
			return
		}
	}
}

// gone says whether err means the session will never change again.
func gone(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && (ae.Code == api.CodeNotFound || ae.Code == api.CodeExited || ae.Code == api.CodeBadRequest)
}

// The controller's /mcp.

// mcpSessionTimeout ends MCP sessions over HTTP that made no request for this long.
const mcpSessionTimeout = 30 * time.Minute

// mcpRemoteHeader carries the client's address from /mcp's handler to the tool
// calls (the SDK gives them the request's header, not the request). Whatever a
// client sends in it is overwritten.
const mcpRemoteHeader = "Fleetmux-Mcp-Remote"

// mcpHandler builds the controller's MCP server and returns /mcp's handler: the
// streamable HTTP transport, behind guard like the API (token, Host and Origin
// checks). MCP sessions end when Shutdown starts (their event streams would hold
// it); tool calls in flight get the grace, then end with the controller's context.
func (c *Controller) mcpHandler() http.Handler {
	m := newMCP(c, MCPOptions{
		Version: Version,
		Context: c.ctx,
		Logger:  c.log,
		Actor: func(req mcp.Request) string {
			host := ""
			if ex := req.GetExtra(); ex != nil && ex.Header != nil {
				host = ex.Header.Get(mcpRemoteHeader)
			}
			return mcpActor(req, host)
		},
		Audit: func(_ context.Context, rec api.AuditRecord) { c.audits.record(rec) },
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		if c.streamCtx.Err() != nil {
			return nil // shutting down: no new sessions
		}
		return m.srv
	}, &mcp.StreamableHTTPOptions{
		SessionTimeout:      mcpSessionTimeout,
		MaxRequestBodyBytes: api.MaxBodyBytes, // as the API's
		// guard already refuses non-loopback Host names without a token, and the SDK's
		// check would refuse them with one too (a proxy on this host).
		DisableLocalhostProtection: true,
	})
	c.reqWG.Add(1)
	context.AfterFunc(c.streamCtx, func() {
		defer c.reqWG.Done()
		m.closeSessions()
		<-c.ctx.Done()
		m.closeSessions() // any a request in flight made meanwhile
		m.close()
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set(mcpRemoteHeader, hostOnly(r.RemoteAddr))
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		c.metrics.requests.WithLabelValues("/mcp", strconv.Itoa(rec.code)).Inc()
		c.metrics.latency.WithLabelValues("/mcp").Observe(time.Since(start).Seconds())
	})
}
