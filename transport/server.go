package transport

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/nats-io/nats-server/v2/server"
)

// DefaultServerListen is where StartServer listens when ServerConfig.Listen is empty.
const DefaultServerListen = "127.0.0.1:4222"

// ServerConfig configures an embedded nats-server. The zero value listens on
// DefaultServerListen, loopback only, without JetStream, and without
// authentication, which only tests use: every fleetmux command sets Auth.
type ServerConfig struct {
	// Listen is the client listener, host:port. Default DefaultServerListen; port 0
	// picks a free port (see (*Server).Addr). A host other than loopback (including an
	// empty host, meaning every interface) requires Auth.
	Listen string
	// DataDir holds the JetStream store (nats-server adds a jetstream/ directory
	// under it). Required when JetStream is on.
	DataDir string
	// JetStream enables JetStream with file storage under DataDir.
	JetStream bool
	// Auth runs the server in operator mode: only users of Auth's fleet account (and
	// system account) connect, each with the permissions of its user JWT; anonymous,
	// token and user/password clients are refused. The server then speaks TLS only,
	// with a certificate issued from Auth's CA at start (for TLSHosts, the listen and
	// cluster hosts, localhost and loopback), and routes use mutual TLS with it.
	Auth *natsauth.Authority
	// TLSHosts are more names or addresses the server's certificate carries (the
	// names clients use to reach it, e.g. a DNS name).
	TLSHosts []string
	// Routes are URLs of other servers to cluster with (nats://host:port of their
	// cluster listeners). Requires ClusterListen.
	Routes []string
	// ClusterListen is the cluster (route) listener, host:port; empty means no
	// clustering. A host other than loopback requires Auth (routes then authenticate
	// with certificates of Auth's CA, both ways).
	ClusterListen string
	// Name is the server name. Default: nats-server's generated id. Required when
	// JetStream is clustered (JetStream with Routes): it must be unique and stable.
	Name string
	// ClusterName names the cluster. Default "fleetmux".
	ClusterName string
	// ReadyTimeout bounds how long StartServer waits for the server to accept
	// connections. Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log: notices and debug at debug, warnings and
	// errors at their own level. Default slog.Default().
	Logger *slog.Logger
}

// Server is a running embedded nats-server.
type Server struct {
	ns  *server.Server
	cfg ServerConfig // effective, Listen with the actual port
	log *slog.Logger

	shutOnce sync.Once
	done     chan struct{} // closed when the server has shut down
}

// StartServer starts an embedded nats-server and waits until it accepts connections
// (and, with JetStream, until JetStream is enabled). It refuses a listener beyond
// loopback without authentication (ErrInsecure) and an invalid configuration
// (ErrConfig). Shut the server down with Shutdown; a new server may then start on the
// same port and DataDir.
func StartServer(cfg ServerConfig) (*Server, error) {
	opts, err := cfg.serverOptions()
	if err != nil {
		return nil, err
	}
	logger := loggerOr(cfg.Logger)
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("transport: nats server: %w", err)
	}
	nlog := &natsServerLog{l: logger}
	ns.SetLoggerV2(nlog, logger.Enabled(context.Background(), slog.LevelDebug), false, false)
	ns.Start() // does not block: it starts the server's own goroutines

	ready := cfg.ReadyTimeout
	if ready <= 0 {
		ready = 10 * time.Second
	}
	deadline := time.Now().Add(ready)
	fail := func(format string, args ...any) (*Server, error) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("%w: "+format+"%s", append(append([]any{ErrNotReady}, args...), nlog.lastErrorSuffix())...)
	}
	// Poll rather than ReadyForConnections(ready) in one go: a listener that
	// cannot bind (port in use) fails at once instead of after the whole timeout.
	for !ns.ReadyForConnections(20 * time.Millisecond) {
		if nlog.fatal() || time.Now().After(deadline) {
			return fail("not accepting connections on %s", cfg.listen())
		}
	}
	for cfg.JetStream && !ns.JetStreamEnabled() {
		if nlog.fatal() || time.Now().After(deadline) {
			return fail("jetstream not enabled after %v", ready)
		}
		time.Sleep(5 * time.Millisecond)
	}

	s := &Server{ns: ns, cfg: cfg, log: logger, done: make(chan struct{})}
	host, _, _ := net.SplitHostPort(cfg.listen())
	s.cfg.Listen = net.JoinHostPort(host, strconv.Itoa(s.port()))
	logger.Debug("embedded nats server ready", "addr", s.Addr(), "jetstream", cfg.JetStream)
	return s, nil
}

func (cfg ServerConfig) listen() string {
	if cfg.Listen == "" {
		return DefaultServerListen
	}
	return cfg.Listen
}

// splitListen parses host:port; port 0 becomes nats-server's "random port".
func splitListen(what, hostport string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s %q: %w", ErrConfig, what, hostport, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%w: %s %q: bad port", ErrConfig, what, hostport)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// serverOptions validates cfg and builds nats-server options.
func (cfg ServerConfig) serverOptions() (*server.Options, error) {
	host, port, err := splitListen("listen", cfg.listen())
	if err != nil {
		return nil, err
	}
	if !api.IsLoopbackHost(host) && cfg.Auth == nil {
		return nil, fmt.Errorf("%w: nats listen %s is not loopback: it needs the fleet's nats authority (fleetmux controller init)", ErrInsecure, cfg.listen())
	}
	if cfg.JetStream && cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: jetstream needs a data dir", ErrConfig)
	}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       host,
		Port:       port,
		NoSigs:     true,
		JetStream:  cfg.JetStream,
		StoreDir:   cfg.DataDir,
	}
	if len(cfg.Routes) > 0 && cfg.ClusterListen == "" {
		return nil, fmt.Errorf("%w: nats routes need a cluster listen address", ErrConfig)
	}
	var chost string
	if cfg.ClusterListen != "" {
		var cport int
		chost, cport, err = splitListen("cluster listen", cfg.ClusterListen)
		if err != nil {
			return nil, err
		}
		if !api.IsLoopbackHost(chost) && cfg.Auth == nil {
			return nil, fmt.Errorf("%w: nats cluster listen %s is not loopback: it needs the fleet's nats authority (routes authenticate with its certificates)", ErrInsecure, cfg.ClusterListen)
		}
		if cfg.JetStream && len(cfg.Routes) > 0 && cfg.Name == "" {
			return nil, fmt.Errorf("%w: clustered jetstream needs a unique, stable server name", ErrConfig)
		}
		name := cfg.ClusterName
		if name == "" {
			name = "fleetmux"
		}
		opts.Cluster = server.ClusterOpts{Name: name, Host: chost, Port: cport}
		for _, r := range cfg.Routes {
			u, err := url.Parse(strings.TrimSpace(r))
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("%w: nats route %q: want nats://host:port", ErrConfig, r)
			}
			if u.User != nil {
				return nil, fmt.Errorf("%w: nats route %q: no credentials in route urls (routes authenticate with tls certificates)", ErrConfig, u.Redacted())
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	if cfg.Auth != nil {
		if err := cfg.Auth.Configure(opts, append(slices.Clone(cfg.TLSHosts), host, chost)); err != nil {
			return nil, err
		}
	}
	return opts, nil
}

// port is the actual client port (0 when not listening).
func (s *Server) port() int {
	a, ok := s.ns.Addr().(*net.TCPAddr)
	if !ok {
		return 0
	}
	return a.Port
}

// Addr is the actual client listener address, host:port (the host as configured).
func (s *Server) Addr() string { return s.cfg.Listen }

// ClientURL is the URL clients connect to, nats://host:port with the actual port; a
// wildcard listen host becomes loopback. Credentials are not included.
func (s *Server) ClientURL() string {
	host, port, _ := net.SplitHostPort(s.cfg.Listen)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return "nats://" + net.JoinHostPort(host, port)
}

// Config is the effective configuration: Listen carries the actual port, so a new
// server started from it takes the same port and DataDir.
func (s *Server) Config() ServerConfig { return s.cfg }

// Shutdown stops the server and waits until it has shut down or ctx is done. It is
// idempotent; the shutdown carries on in the background when ctx ends first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() {
		go func() { // owned by s: done tells when it has finished
			defer close(s.done)
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
		}()
	})
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("transport: nats server shutdown: %w", ctx.Err())
	}
}
