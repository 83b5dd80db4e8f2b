// Package controller is fleetmux's fleet core: a node table built from gossip
// and the nodes' NATS connections, routing of the front doors' operations to the
// node agents over the bus, fan-out, output streams, tokens, metrics and audit.
// The front doors are packages of their own (httpapi, sshd, mcpserver), each over
// a Fleet interface of its own that the controller satisfies under the same
// method names; cmd/fleetmux wires them. It holds no state the nodes do not: any
// number of controllers can run at once, and a restarted one loses nothing.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/trust"
	"github.com/prometheus/client_golang/prometheus"
)

// Bus is what the controller needs of its message bus (NATS in production; cmd
// wires transport.Conn in). Implementations are safe for concurrent use.
type Bus interface {
	// Request sends a request and waits for the reply until ctx is done. It fails
	// fast (an error wrapping ErrNoResponders, via IsNoResponders) when nobody serves
	// the subject. A node's error reply (NATS micro's error headers) is returned as
	// its *api.Error.
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
	// DefaultRequestTimeout bounds a node request that does not wait for a command.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultFanoutTimeout is a fan-out target's timeout when the request sets none.
	DefaultFanoutTimeout = 60 * time.Second
	// MaxFanoutBatch bounds the targets a fan-out runs at once.
	MaxFanoutBatch = 256
	// MaxFanoutTargets bounds the targets of one fan-out.
	MaxFanoutTargets = 4096
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
	// Exposed says something of this controller's listens beyond loopback (its
	// HTTP API, SSH front door, embedded NATS or gossip): it makes running with no
	// policy a loud warning at Start.
	Exposed bool
	// Token, when set, is one admin token accepted besides the store's (the
	// bootstrap token: --api-token, fleetmux dev's <data>/token), sent as
	// "Authorization: Bearer TOKEN".
	Token string
	// RequestTimeout bounds a node request that does not wait for a command to run
	// (create, get, screen, input, …). Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Registry receives the controller's Prometheus metrics (the HTTP API serves
	// it on /metrics). Default a new registry of its own.
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
	// FollowBuffer is how many output messages a stream (Follow) holds for a slow
	// client; past it the stream drops live messages and reads the range from the
	// node instead (the node's publishing never waits for a stream). Default
	// DefaultFollowBuffer.
	FollowBuffer int
	// DownGrace is how long a node that gossip alone reports dead or gone stays
	// suspect before the node table believes it (see downGrace). Default 1s.
	DownGrace time.Duration
	// LearnWindow is how long after New a request for a node is answered
	// unavailable (503: try again) rather than not found while the controller
	// knows no node at all: a controller that has just started learns the nodes
	// from gossip and NATS presence within moments, and a client that followed a
	// session across its restart must not take "unknown node" for "gone".
	// Default 10s; negative: none.
	LearnWindow time.Duration
	// Logger receives the operator's log. Default slog.Default().
	Logger *slog.Logger
}

// Errors callers match on.
var (
	ErrConfig   = errors.New("controller: bad config")
	ErrInsecure = errors.New("controller: insecure config")
	ErrClosed   = errors.New("controller: closed")
)

// Controller is the fleet core the front doors drive. Create it with New, then
// Start (or Serve); Shutdown or Close stop it.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	subj    api.Subjects
	nodes   *table
	metrics *metrics
	audits  *auditLog
	longs   *longs // each principal's long requests (run, wait)
	// spoofs rate-limits the warnings about nodes that answer for other nodes.
	spoofs *warnLimiter
	tokens *tokenCache
	// share gives streams one bus subscription per subject (share.go).
	share *shared
	// stopTokens ends the token store's watch (set by Start, called by Shutdown).
	stopTokens func()
	// stopPresence ends the Presence watch and the learner (set by Start, called
	// by Shutdown).
	stopPresence func()
	// bg counts the controller's own goroutines that Shutdown waits for.
	bg sync.WaitGroup
	// tokensSynced: the token cache holds the store's tokens (watchTokens).
	tokensSynced atomic.Bool
	// learning is the learner of nodes known from NATS alone (learn.go).
	learning atomic.Pointer[learner]

	// ctx is cancelled by Close and Shutdown: long requests, streams and fan-outs
	// end with it.
	ctx    context.Context
	cancel context.CancelFunc

	// born is when New made the controller (LearnWindow counts from it).
	born time.Time

	// spawnMu serialises spawns of child agents (agents.go).
	spawnMu sync.Mutex

	mu      sync.Mutex // guards started, closed
	started bool
	closed  bool
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
	if cfg.Token == "" && cfg.Tokens == nil {
		return nil, fmt.Errorf("%w: no API tokens: every request needs one, on loopback too (other local users share it): set a token store or a bootstrap token", ErrInsecure)
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
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.FollowBuffer <= 0 {
		cfg.FollowBuffer = DefaultFollowBuffer
	}
	if cfg.DownGrace <= 0 {
		cfg.DownGrace = downGrace
	}
	if cfg.LearnWindow == 0 {
		cfg.LearnWindow = defaultLearnWindow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Controller{
		born:   time.Now(),
		cfg:    cfg,
		log:    cfg.Logger,
		subj:   api.Subjects{Prefix: cfg.Prefix},
		nodes:  newTable(cfg.DownGrace),
		longs:  newLongs(),
		spoofs: newWarnLimiter(time.Minute),
		tokens: newTokenCache(),
		share:  newShared(cfg.Bus),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	var err error
	c.metrics, err = newMetrics(cfg.Registry, c.nodes)
	if err != nil {
		return nil, fmt.Errorf("controller: metrics: %w", err)
	}
	if c.audits, err = openAudit(cfg.Bus, c.subj.Audit(cfg.Name), cfg.Name, auditFile{path: cfg.AuditFile, maxBytes: cfg.AuditMaxBytes, keep: cfg.AuditKeep}, c.log); err != nil {
		return nil, err
	}
	return c, nil
}

// Observe applies a gossip membership change to the node table. It never blocks:
// call it from the membership layer's change callback.
func (c *Controller) Observe(m Member) { c.nodes.observe(m) }

// Start binds the controller to its stores: it fills the token cache, watches
// the nodes' NATS connections and looks at the policy. It does not block.
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
	c.started = true
	return nil
}

// Serve starts the controller and runs it until ctx is done, then shuts it down.
func (c *Controller) Serve(ctx context.Context) error {
	if err := c.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	return c.Close()
}

// Shutdown stops the controller: it cancels what still runs (long runs, streams,
// fan-outs: the commands keep running on their nodes), stops its watches and waits
// for them. Stop the front doors first: their requests in flight get their grace
// there. It is idempotent; it does not wait on anything ctx could bound.
func (c *Controller) Shutdown(context.Context) error {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	if already {
		return nil
	}
	if c.stopTokens != nil {
		c.stopTokens()
	}
	if c.stopPresence != nil {
		c.stopPresence()
	}
	c.bg.Wait()
	c.nodes.close()
	c.audits.close()
	return nil
}

// Close stops the controller (Shutdown).
func (c *Controller) Close() error { return c.Shutdown(context.Background()) }
