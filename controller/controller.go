// Package controller is fleetmux's controller: a node table built from gossip,
// routing of the HTTP API to the node agents over the bus, fan-out, output streams
// (attach, logs -f), metrics and audit. It mounts the MCP server of package
// mcpserver at /mcp over itself (mcp.go); the MCP tools live there. The SSH front
// door is package sshd, which cmd/fleetmux starts over the controller. It
// holds no state the nodes do not: any number of controllers can run at once, and a
// restarted one loses nothing.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/netcap"
	"github.com/fleetmux/fleetmux/trust"
	"github.com/prometheus/client_golang/prometheus"
)

// Bus is what the controller needs of its message bus (NATS in production; cmd
// wires transport.Conn in). Implementations are safe for concurrent use.
type Bus interface {
	// Request sends a request and waits for the reply until ctx is done. It fails
	// fast (an error wrapping ErrNoResponders, via IsNoResponders) when nobody serves
	// the subject.
	Request(ctx context.Context, subject string, header map[string]string, data []byte) ([]byte, error)
	// Subscribe calls fn for every message on subject until stop is called; stop
	// waits until fn is no longer running. fn runs on the bus's delivery goroutine
	// and must not block.
	Subscribe(subject string, fn func(subject string, header map[string]string, data []byte)) (stop func() error, err error)
	// Publish sends one message without waiting on the network (audit records).
	Publish(subject string, header map[string]string, data []byte) error
	// Connected reports whether the bus is connected now.
	Connected() bool
}

// Signer signs a node request of body to subject for actor with role: the value
// of its api.HeaderAuth header (trust.Signer in production, with this controller's
// key and certificate). Implementations are safe for concurrent use.
type Signer interface {
	Sign(subject string, body []byte, who trust.Claims) (string, error)
}

var _ Signer = (*trust.Signer)(nil)

// Defaults.
const (
	DefaultHTTPListen = "127.0.0.1:7070"
	// DefaultRequestTimeout bounds a node request that does not wait for a command.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultFanoutTimeout is a fan-out target's timeout when the request sets none.
	DefaultFanoutTimeout = 60 * time.Second
	// MaxFanoutBatch bounds the targets a fan-out runs at once.
	MaxFanoutBatch = 256
	// MaxFanoutTargets bounds the targets of one fan-out.
	MaxFanoutTargets = 4096
	// httpHeaderTimeout bounds the wait for a request's header, on a new
	// connection too; httpIdleTimeout a kept-alive connection's wait for its next
	// request.
	httpHeaderTimeout = 5 * time.Second
	httpIdleTimeout   = 30 * time.Second
)

// Config configures New. The zero value is not usable: Bus is required.
type Config struct {
	// Name is this controller's name (api.ValidName): it names its audit subject
	// and it is the actor prefix of the requests it makes. Default "controller".
	Name string
	// Prefix is the NATS subject prefix. Default api.DefaultPrefix.
	Prefix string
	// Bus reaches the nodes. Required.
	Bus Bus
	// Signer signs every node request with the acting principal's actor and role
	// (nodes refuse unsigned requests). Required.
	Signer Signer
	// HTTPListen is the HTTP API's address. Default DefaultHTTPListen (loopback).
	HTTPListen string
	// Tokens is the shared store of API tokens (FLEETMUX_TOKENS): the tokens in it
	// are accepted, each with its role, and /v1/tokens manages them. Token or Tokens
	// is required: every request but /healthz needs a token, even on loopback
	// (other local users share it).
	Tokens TokenStore
	// Policy is the shared store of the guardrail policy (FLEETMUX_POLICY) that
	// /v1/policy reads and writes and every node enforces. nil: the policy routes
	// answer unavailable.
	Policy PolicyStore
	// Presence tells which nodes hold a NATS connection: node liveness from two
	// signals (liveness.go). nil: gossip alone, and any gossip member with the
	// fleet's key is listed alive.
	Presence Presence
	// Exposed says something of this controller's besides HTTPListen listens beyond
	// loopback (its SSH front door, embedded NATS or gossip): like an HTTP API
	// beyond loopback, it makes running with no policy a loud warning at Start.
	Exposed bool
	// Token, when set, is one admin token accepted besides the store's (the
	// bootstrap token: --api-token, fleetmux dev's <data>/token), sent as
	// "Authorization: Bearer TOKEN".
	Token string
	// RequestTimeout bounds a node request that does not wait for a command to run
	// (create, get, screen, input, …). Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Registry receives the controller's Prometheus metrics, served on /metrics.
	// Default a new registry of its own.
	Registry *prometheus.Registry
	// AuditFile, when set, is a JSONL file every audit record is appended to
	// (mode 0600), besides being published on the controller's audit subject.
	AuditFile string
	// AuditMaxBytes is the size at which AuditFile is rotated: renamed to
	// AuditFile.1 (the older ones to .2, .3, …) and started afresh. Default
	// DefaultAuditMaxBytes; negative: never rotated.
	AuditMaxBytes int64
	// AuditKeep is how many rotated files are kept (the oldest is removed).
	// Default DefaultAuditKeep.
	AuditKeep int
	// Logger receives the operator's log. Default slog.Default().
	Logger *slog.Logger
	// Version is the controller's version (cmd's build version), announced in the
	// MCP handshake. Default api.DevVersion.
	Version string
}

// Errors callers match on.
var (
	ErrConfig   = errors.New("controller: bad config")
	ErrInsecure = errors.New("controller: insecure config")
	ErrClosed   = errors.New("controller: closed")
)

// Controller routes the HTTP API to the nodes. Create it with New, then Start (or
// Serve); Shutdown or Close stop it.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	subj    api.Subjects
	nodes   *table
	metrics *metrics
	handler http.Handler
	audits  *auditLog
	longs   *longs // each principal's long requests (run, wait)
	// spoofs rate-limits the warnings about nodes that answer for other nodes.
	spoofs *warnLimiter
	tokens *tokenCache
	// patterns are the mux's route patterns (routes), each in api.Routes.
	patterns []string
	// stopTokens ends the token store's watch (set by Start, called by Shutdown).
	stopTokens func()
	// stopPresence ends the Presence watch (set by Start, called by Shutdown).
	stopPresence func()

	// ctx is cancelled by Close and Shutdown (after their grace): long requests,
	// streams and fan-outs end with it.
	ctx    context.Context
	cancel context.CancelFunc
	// streamCtx (a child of ctx) ends attach and follow streams at Shutdown's start:
	// they never finish on their own.
	streamCtx    context.Context
	streamCancel context.CancelFunc

	mu      sync.Mutex // guards srv, ln, started, closed
	srv     *http.Server
	ln      net.Listener
	started bool
	closed  bool
	serveWG sync.WaitGroup // the HTTP serve goroutine
	reqWG   sync.WaitGroup // goroutines started by requests (fan-out workers, stream pumps)
}

// New validates cfg and builds a controller. It does not listen yet.
func New(cfg Config) (*Controller, error) {
	if cfg.Bus == nil {
		return nil, fmt.Errorf("%w: no bus", ErrConfig)
	}
	if cfg.Signer == nil {
		return nil, fmt.Errorf("%w: no signer: node requests must be signed (trust.LoadSigner of the controller's key and certificate)", ErrConfig)
	}
	if cfg.Name == "" {
		cfg.Name = "controller"
	}
	if err := api.ValidName(cfg.Name); err != nil {
		return nil, fmt.Errorf("%w: name: %w", ErrConfig, err)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = api.DefaultPrefix
	}
	if err := api.ValidPrefix(cfg.Prefix); err != nil {
		return nil, fmt.Errorf("%w: prefix: %w", ErrConfig, err)
	}
	if cfg.HTTPListen == "" {
		cfg.HTTPListen = DefaultHTTPListen
	}
	host, _, err := net.SplitHostPort(cfg.HTTPListen)
	if err != nil {
		return nil, fmt.Errorf("%w: http listen %q: %w", ErrConfig, cfg.HTTPListen, err)
	}
	if cfg.Token == "" && cfg.Tokens == nil {
		where := "on loopback too: other local users share it"
		if !api.IsLoopbackHost(host) {
			where = "beyond loopback"
		}
		return nil, fmt.Errorf("%w: the HTTP API on %s needs API tokens (%s): set a token store or a bootstrap token", ErrInsecure, cfg.HTTPListen, where)
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.AuditMaxBytes == 0 {
		cfg.AuditMaxBytes = DefaultAuditMaxBytes
	}
	if cfg.AuditKeep <= 0 {
		cfg.AuditKeep = DefaultAuditKeep
	}
	if cfg.Version == "" {
		cfg.Version = api.DevVersion
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Controller{
		cfg:    cfg,
		log:    cfg.Logger,
		subj:   api.Subjects{Prefix: cfg.Prefix},
		nodes:  newTable(),
		longs:  newLongs(),
		spoofs: newWarnLimiter(time.Minute),
		tokens: newTokenCache(),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.streamCtx, c.streamCancel = context.WithCancel(c.ctx)
	c.metrics, err = newMetrics(cfg.Registry, c.nodes)
	if err != nil {
		return nil, fmt.Errorf("controller: metrics: %w", err)
	}
	if c.audits, err = openAudit(cfg.Bus, c.subj.Audit(cfg.Name), cfg.Name, auditFile{path: cfg.AuditFile, maxBytes: cfg.AuditMaxBytes, keep: cfg.AuditKeep}, c.log); err != nil {
		return nil, err
	}
	c.handler = c.routes()
	return c, nil
}

// Observe applies a gossip membership change to the node table. It never blocks:
// call it from the membership layer's change callback.
func (c *Controller) Observe(m Member) { c.nodes.observe(m) }

// Handler is the HTTP API (what Start serves), for embedding in another server.
func (c *Controller) Handler() http.Handler { return c.handler }

// Start listens on cfg.HTTPListen and serves the API on a goroutine of its own.
// It does not block.
func (c *Controller) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.started {
		return errors.New("controller: already started")
	}
	if err := c.watchTokens(); err != nil {
		return err
	}
	if err := c.watchPresence(); err != nil {
		return fmt.Errorf("controller: presence: %w", err)
	}
	c.checkPolicy()
	ln, err := net.Listen("tcp", c.cfg.HTTPListen)
	if err != nil {
		return fmt.Errorf("controller: listen: %w", err)
	}
	// Every connection costs a descriptor before it authenticates: the listener
	// caps them (in all and per address; an idle one gives way to a new one), and
	// a connection that sends no request is closed within seconds.
	capped := netcap.New(ln, netcap.Config{Name: "http", Logger: c.log})
	c.ln = capped
	c.srv = &http.Server{
		Handler:           c.handler,
		ReadHeaderTimeout: httpHeaderTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return c.ctx },
		ConnState: func(nc net.Conn, st http.ConnState) {
			capped.Idle(nc, st == http.StateNew || st == http.StateIdle)
		},
		ErrorLog: slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}
	c.started = true
	c.serveWG.Add(1)
	go func() {
		defer c.serveWG.Done()
		if err := c.srv.Serve(capped); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("http serve", "err", err)
		}
	}()
	c.log.Info("controller serving", "addr", ln.Addr().String())
	return nil
}

// Addr is the address the API listens on (after Start), e.g. 127.0.0.1:7070.
func (c *Controller) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln == nil {
		return ""
	}
	return c.ln.Addr().String()
}

// Serve starts the controller and serves until ctx is done, then shuts down with a
// grace of 5 s for requests in flight.
func (c *Controller) Serve(ctx context.Context) error {
	if err := c.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Shutdown(sctx)
}

// Shutdown stops accepting requests and waits for those in flight until ctx is
// done; then it cancels what still runs (streams, long runs: the commands keep
// running on their nodes) and waits for every goroutine of the controller.
// It is idempotent.
func (c *Controller) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	srv := c.srv
	c.mu.Unlock()
	var err error
	if srv != nil && !already {
		// Streams never finish on their own: end them now; plain requests get the grace.
		done := make(chan struct{})
		go func() {
			defer close(done)
			err = srv.Shutdown(ctx)
		}()
		c.cancelStreams()
		<-done
		if err != nil {
			srv.Close()
		}
	}
	c.cancel()
	if c.stopTokens != nil {
		c.stopTokens()
	}
	if c.stopPresence != nil {
		c.stopPresence()
	}
	c.nodes.close()
	c.serveWG.Wait()
	c.reqWG.Wait()
	c.audits.close()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = nil // requests cut short at the deadline, as documented
	}
	return err
}

// Close stops the controller at once: requests in flight are cancelled.
func (c *Controller) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return c.Shutdown(ctx)
}

// cancelStreams ends attach and follow streams (they would hold Shutdown forever).
func (c *Controller) cancelStreams() { c.streamCancel() }
