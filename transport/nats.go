package transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/nats-io/nats.go"
)

// DefaultNATSURL is where Connect goes when NATSConfig.URL is empty.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// NATSConfig configures Connect. The zero value connects to DefaultNATSURL without
// credentials (which only a test server accepts).
type NATSConfig struct {
	// URL is one or more server URLs separated by commas
	// (nats://host:port, tls://host:port). Default DefaultNATSURL. A server beyond
	// loopback is reached over TLS only: that needs a CA (from Creds, CredsFile or
	// CAFile) or a tls:// URL (verified against the system's roots).
	URL string
	// Creds are the user's credentials (natsauth.Authority.Issue). At most one of Creds and
	// CredsFile may be set. Their CA, if any, verifies the server (and then TLS is
	// required), and their inbox prefix (natsauth.Identity.Inbox) becomes the connection's.
	Creds *natsauth.Creds
	// CredsFile is a .creds file (natsauth.ReadCreds), read once by Connect.
	CredsFile string
	// CAFile is a PEM file of root CAs that verify the server's TLS certificate
	// (instead of the CA in the credentials); setting it requires TLS.
	CAFile string
	// CertFile and KeyFile are the client's TLS certificate and key (both or neither).
	CertFile, KeyFile string
	// Name is the client connection name shown by the server (e.g. the node name).
	Name string
	// ReconnectBufSize bounds the bytes Publish buffers while disconnected; beyond it
	// Publish fails with an error wrapping nats.ErrReconnectBufExceeded (nats.go
	// checks before adding a message, so the buffer may exceed this by one message).
	// Default 32 MiB; negative disables buffering (Publish fails while disconnected).
	ReconnectBufSize int
	// ReconnectWait is the pause between reconnect attempts to the same server.
	// Default 250ms (plus up to 100ms jitter).
	ReconnectWait time.Duration
	// WriteTimeout bounds one write to the server's socket. nats.go writes from
	// Publish itself once its 32 KiB write buffer is full, so when the server does
	// not keep up (TCP backpressure) Publish blocks up to this long; then the
	// connection is dropped and Publish buffers while it reconnects. Default 2s.
	WriteTimeout time.Duration
	// DrainTimeout bounds how long Close drains subscriptions and flushes pending
	// messages before it closes the connection anyway. Default 5s.
	DrainTimeout time.Duration
	// Logger receives connection events (disconnects, reconnects, async errors).
	// Default slog.Default().
	Logger *slog.Logger
}

func (cfg NATSConfig) withDefaults() NATSConfig {
	if strings.TrimSpace(cfg.URL) == "" {
		cfg.URL = DefaultNATSURL
	}
	switch {
	case cfg.ReconnectBufSize == 0:
		cfg.ReconnectBufSize = 32 << 20
	case cfg.ReconnectBufSize < 0:
		cfg.ReconnectBufSize = -1 // nats.go: no buffering
	}
	if cfg.ReconnectWait <= 0 {
		cfg.ReconnectWait = 250 * time.Millisecond
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 2 * time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 5 * time.Second
	}
	cfg.Logger = loggerOr(cfg.Logger)
	return cfg
}

func (cfg NATSConfig) validate() error {
	if cfg.Creds != nil && cfg.CredsFile != "" {
		return fmt.Errorf("%w: set either nats creds or a creds file, not both", ErrConfig)
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return fmt.Errorf("%w: nats tls cert file and key file must be set together", ErrConfig)
	}
	return nil
}

// options translates the config into nats.go options (handlers excluded). It reads
// the credentials and CA files.
func (cfg NATSConfig) options() ([]nats.Option, error) {
	opts := []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(cfg.ReconnectWait),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectBufSize(cfg.ReconnectBufSize),
		nats.DrainTimeout(cfg.DrainTimeout),
		nats.FlusherTimeout(cfg.WriteTimeout),
		nats.ReconnectOnFlusherError(),
	}
	if cfg.Name != "" {
		opts = append(opts, nats.Name(cfg.Name))
	}
	creds := cfg.Creds
	if cfg.CredsFile != "" {
		c, err := natsauth.ReadCreds(cfg.CredsFile)
		if err != nil {
			return nil, err
		}
		creds = c
	}
	var ca []byte
	if creds != nil {
		uc, err := creds.Claims()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserJWTAndSeed(creds.JWT, string(creds.Seed)))
		if inbox := natsauth.InboxOf(uc.Permissions); inbox != "" {
			opts = append(opts, nats.CustomInboxPrefix(inbox))
		}
		ca = creds.CA
	}
	if cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("transport: nats ca: %w", err)
		}
		ca = b
	}
	if len(ca) > 0 || cfg.CertFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if len(ca) > 0 {
			pool, err := natsauth.CertPool(ca)
			if err != nil {
				return nil, fmt.Errorf("%w: nats ca: %w", ErrConfig, err)
			}
			tc.RootCAs = pool
		}
		if cfg.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("transport: nats client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(tc))
	} else {
		for _, u := range strings.Split(cfg.URL, ",") {
			u = strings.TrimSpace(u)
			if !strings.Contains(u, "://") {
				u = "nats://" + u
			}
			pu, err := url.Parse(u)
			if err != nil || pu.Host == "" {
				return nil, fmt.Errorf("%w: nats url %q", ErrConfig, redactURLs(u))
			}
			if pu.Scheme != "tls" && !api.IsLoopbackHost(pu.Hostname()) {
				return nil, fmt.Errorf("%w: nats server %s is beyond loopback: TLS needs a CA (the .creds file from fleetmux enroll has it) or a tls:// url", ErrInsecure, pu.Host)
			}
		}
	}
	return opts, nil
}

// Conn is a NATS connection that reconnects forever. It satisfies the bus interfaces
// of node and controller (Publish, Serve, Connected) and adds Request for callers.
type Conn struct {
	nc           *nats.Conn
	log          *slog.Logger
	drainTimeout time.Duration

	closedCh  chan struct{} // closed by the nats closed handler
	closeOnce sync.Once     // guards closedCh
	shutOnce  sync.Once     // guards Close
	shutErr   error

	mu       sync.Mutex
	closing  bool
	nextSvc  int
	services map[int]func() error // stop functions of running Serve calls
	hooks    map[int]func()       // OnReconnect hooks; they never block

	// Until the first connection, nats.go refuses messages with headers (it does
	// not know yet whether the server supports them), so Publish keeps them here
	// and earlyLoop sends them, in order, once connected; then live is set.
	live       atomic.Bool
	liveCh     chan struct{} // closed when live is set
	bufLimit   int           // ReconnectBufSize
	pubMu      sync.Mutex    // guards early, earlyBytes, pubClosed; orders them before live publishes
	early      []*nats.Msg
	earlyBytes int
	pubClosed  bool
	connSig    chan struct{} // cap 1: the connection may be up
	stopBg     chan struct{} // closed by Close
	bg         sync.WaitGroup
}

// Connect creates a connection from cfg. The connection reconnects forever: when no
// server is reachable, Connect still returns a *Conn, not yet connected, that keeps
// trying in the background (Connected reports false until then) while Publish
// buffers up to ReconnectBufSize bytes. Errors are returned for an invalid config
// (ErrConfig), unreadable TLS or credentials files, or when ctx is done.
func Connect(ctx context.Context, cfg NATSConfig) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("transport: connect: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Conn{
		log:          cfg.Logger,
		drainTimeout: cfg.DrainTimeout,
		closedCh:     make(chan struct{}),
		services:     make(map[int]func() error),
		liveCh:       make(chan struct{}),
		bufLimit:     cfg.ReconnectBufSize,
		connSig:      make(chan struct{}, 1),
		stopBg:       make(chan struct{}),
	}
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	// Handlers run on nats.go's own callback goroutine, one at a time; they only log,
	// so they never hold it up.
	opts = append(opts,
		nats.ConnectHandler(func(nc *nats.Conn) {
			c.log.Info("nats connected", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
			c.signalConnected()
			c.runHooks()
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			c.log.Warn("nats disconnected; reconnecting and buffering publishes", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			c.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
			c.signalConnected()
			c.runHooks()
		}),
		nats.ReconnectErrHandler(func(nc *nats.Conn, err error) {
			c.log.Debug("nats reconnect attempt failed", "err", err)
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				c.log.Warn("nats async error", "subject", sub.Subject, "err", err)
				return
			}
			c.log.Warn("nats async error", "err", err)
		}),
		nats.LameDuckModeHandler(func(nc *nats.Conn) {
			c.log.Info("nats server entering lame duck mode; will move to another server")
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			c.mu.Lock()
			byUs := c.closing
			c.mu.Unlock()
			if !byUs {
				// nats.go gave up by itself, e.g. after repeated authorization errors.
				c.log.Error("nats connection closed; no more reconnects", "err", nc.LastError())
			}
			c.closeOnce.Do(func() { close(c.closedCh) })
		}),
	)
	if dl, ok := ctx.Deadline(); ok {
		// Bound the initial dial by ctx; nats.go's own default is 2s.
		if d := time.Until(dl); d < nats.DefaultTimeout {
			opts = append(opts, nats.Timeout(max(d, time.Millisecond)))
		}
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("transport: connect to nats %s: %w", redactURLs(cfg.URL), err)
	}
	c.nc = nc
	if err := ctx.Err(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("transport: connect: %w", err)
	}
	if nc.IsConnected() {
		c.setLive()
	} else {
		c.log.Warn("nats not reachable yet; retrying in the background", "url", redactURLs(cfg.URL))
		c.bg.Add(1)
		go c.earlyLoop()
	}
	return c, nil
}

func (c *Conn) runHooks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.hooks {
		f()
	}
}

// OnReconnect registers f to be called after each reconnect (and after a first
// connect made in the background), on nats.go's callback goroutine (f must not
// block); remove unregisters it.
func (c *Conn) OnReconnect(f func()) (remove func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hooks == nil {
		c.hooks = map[int]func(){}
	}
	c.nextSvc++
	id := c.nextSvc
	c.hooks[id] = f
	return func() {
		c.mu.Lock()
		delete(c.hooks, id)
		c.mu.Unlock()
	}
}

func (c *Conn) signalConnected() {
	select {
	case c.connSig <- struct{}{}:
	default:
	}
}

func (c *Conn) setLive() {
	c.live.Store(true)
	close(c.liveCh)
}

// earlyLoop waits for the first connection and sends what Publish kept until then.
func (c *Conn) earlyLoop() {
	defer c.bg.Done()
	tick := time.NewTicker(100 * time.Millisecond) // in case a callback is missed
	defer tick.Stop()
	for {
		select {
		case <-c.stopBg:
			return
		case <-c.connSig:
		case <-tick.C:
		}
		if !c.nc.IsConnected() {
			continue
		}
		c.pubMu.Lock()
		c.flushEarlyLocked()
		c.pubMu.Unlock()
		return
	}
}

// flushEarlyLocked hands the kept messages to nats.go in order and makes Publish go
// straight to nats.go from now on. pubMu must be held.
func (c *Conn) flushEarlyLocked() {
	failed := 0
	var firstErr error
	for _, m := range c.early {
		if err := c.nc.PublishMsg(m); err != nil {
			failed++
			if firstErr == nil {
				firstErr = fmt.Errorf("publish %s: %w", m.Subject, err)
			}
		}
	}
	if failed > 0 {
		c.log.Error("messages published before the first nats connection were lost", "lost", failed, "of", len(c.early), "err", firstErr)
	}
	c.early, c.earlyBytes = nil, 0
	c.setLive()
}

// keepEarly keeps a message published before the first connection. pubMu must be
// held.
func (c *Conn) keepEarlyLocked(m *nats.Msg) error {
	if c.pubClosed {
		return fmt.Errorf("%w: publish %s", ErrClosed, m.Subject)
	}
	if !validSubject(m.Subject) {
		return fmt.Errorf("transport: publish %q: %w", m.Subject, nats.ErrBadSubject)
	}
	m.Data = bytes.Clone(m.Data) // the caller may reuse its buffer once Publish returns
	size := len(m.Subject) + len(m.Data)
	for k, v := range m.Header {
		size += len(k) + len(v[0]) + 4
	}
	if c.bufLimit < 0 || c.earlyBytes+size > c.bufLimit {
		return fmt.Errorf("transport: publish %s: not connected yet: %w", m.Subject, nats.ErrReconnectBufExceeded)
	}
	c.early = append(c.early, m)
	c.earlyBytes += size
	return nil
}

// NC returns the underlying nats.go connection (for JetStream and subscriptions).
func (c *Conn) NC() *nats.Conn { return c.nc }

// Connected reports whether the connection is up now.
func (c *Conn) Connected() bool { return c.nc.IsConnected() }

// Publish sends one message without waiting for the server. While disconnected the
// message goes into the reconnect buffer; when that is full (or disabled) or the
// connection is closed, Publish returns the error instead of dropping the message.
// Header keys are sent as given (NATS headers are case-sensitive).
//
// Before the first connection succeeds, messages are kept by Conn itself (nats.go
// refuses headers until it has seen the server's INFO) within the same byte limit,
// and sent in order once connected.
//
// Publish can block for at most WriteTimeout: nats.go writes to the socket from
// Publish when its write buffer is full, and that write waits when the server (or
// the network) does not keep up. Callers on a latency-critical path (a PTY reader)
// should publish from a goroutine of their own.
//
// A message published in the moment between a server dying and the client noticing
// may be lost with the TCP connection, and a core NATS message the server received
// may not be in a JetStream stream yet when the server stops; offsets let
// subscribers detect such gaps.
func (c *Conn) Publish(subject string, header map[string]string, data []byte) error {
	msg := newMsg(subject, header, data)
	if !c.live.Load() {
		c.pubMu.Lock()
		if !c.live.Load() {
			err := c.keepEarlyLocked(msg)
			c.pubMu.Unlock()
			return err
		}
		c.pubMu.Unlock()
	}
	if err := c.nc.PublishMsg(msg); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("%w: publish %s: %w", ErrClosed, subject, err)
		}
		return fmt.Errorf("transport: publish %s: %w", subject, err)
	}
	return nil
}

// Request sends a request and waits for its reply until ctx is done. It fails fast
// with an error wrapping api.ErrNoResponders (and nats.ErrNoResponders) when nobody
// serves subject. A reply that is a service error (Serve's error replies: the
// Nats-Service-Error headers) is returned as its *api.Error, unwrapped.
func (c *Conn) Request(ctx context.Context, subject string, header map[string]string, data []byte) ([]byte, error) {
	select {
	case <-c.liveCh:
	case <-c.stopBg:
		return nil, fmt.Errorf("%w: request %s", ErrClosed, subject)
	case <-ctx.Done():
		return nil, fmt.Errorf("transport: request %s: not connected yet: %w", subject, ctx.Err())
	}
	var cancelID string
	if i := strings.LastIndexByte(subject, '.'); i >= 0 && api.LongVerb(subject[i+1:]) {
		cancelID = rand.Text()
		h := make(map[string]string, len(header)+1)
		maps.Copy(h, header)
		h[api.HeaderCancelID] = cancelID
		header = h
	}
	msg, err := c.nc.RequestMsgWithContext(ctx, newMsg(subject, header, data))
	if err != nil && cancelID != "" && ctx.Err() != nil {
		// The caller left: the server would hold the request to its timeout.
		if perr := c.nc.Publish(subject+cancelSuffix, []byte(cancelID)); perr != nil {
			c.log.Debug("cancel not sent", "subject", subject, "err", perr)
		}
	}
	if err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil, fmt.Errorf("%w: request %s: %w", ErrClosed, subject, err)
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("transport: request %s: %w (%w)", subject, api.ErrNoResponders, err)
		}
		return nil, fmt.Errorf("transport: request %s: %w", subject, err)
	}
	if e := replyError(msg); e != nil {
		return nil, e
	}
	return msg.Data, nil
}

// Close stops every running Serve (waiting for its handlers), drains the connection
// (flushing what is buffered) for at most DrainTimeout, then closes it. While the
// connection is down, buffered messages are dropped. Close is idempotent.
func (c *Conn) Close() error {
	c.shutOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		stops := make([]func() error, 0, len(c.services))
		for _, stop := range c.services {
			stops = append(stops, stop)
		}
		c.mu.Unlock()
		var errs []error
		for _, stop := range stops {
			if err := stop(); err != nil {
				errs = append(errs, err)
			}
		}
		close(c.stopBg)
		c.bg.Wait()
		c.pubMu.Lock()
		c.pubClosed = true
		if !c.live.Load() {
			if c.nc.IsConnected() {
				c.flushEarlyLocked() // the drain below sends them
			} else if len(c.early) > 0 {
				c.log.Warn("closing before nats was ever reachable: messages dropped", "dropped", len(c.early))
				c.early, c.earlyBytes = nil, 0
			}
		}
		c.pubMu.Unlock()
		// Drain closes the connection itself when it is reconnecting and fails
		// when it is closed already; either way the closed handler runs.
		if err := c.nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionReconnecting) && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, fmt.Errorf("transport: drain: %w", err))
			c.nc.Close()
		}
		t := time.NewTimer(c.drainTimeout + time.Second)
		defer t.Stop()
		select {
		case <-c.closedCh:
		case <-t.C:
			errs = append(errs, fmt.Errorf("transport: drain did not finish in %v; closing", c.drainTimeout))
			c.nc.Close()
			<-c.closedCh
		}
		c.shutErr = errors.Join(errs...)
	})
	return c.shutErr
}

// newMsg builds a message with headers (nil when there are none).
func newMsg(subject string, header map[string]string, data []byte) *nats.Msg {
	msg := &nats.Msg{Subject: subject, Data: data}
	if len(header) > 0 {
		msg.Header = make(nats.Header, len(header))
		for k, v := range header {
			msg.Header[k] = []string{v}
		}
	}
	return msg
}

// validSubject is nats.go's check of a publish subject (done by PublishMsg once
// connected): non-empty tokens, no whitespace.
func validSubject(subject string) bool {
	if subject == "" || strings.ContainsAny(subject, " \t\r\n") {
		return false
	}
	for tok := range strings.SplitSeq(subject, ".") {
		if tok == "" {
			return false
		}
	}
	return true
}

// redactURLs hides credentials embedded in a comma-separated URL list, for logs and
// errors.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		u = strings.TrimSpace(u)
		scheme, rest, ok := strings.Cut(u, "://")
		if !ok {
			continue
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			rest = "[REDACTED]@" + rest[at+1:]
		}
		parts[i] = scheme + "://" + rest
	}
	return strings.Join(parts, ",")
}
