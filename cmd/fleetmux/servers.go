package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/tracing"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/gossip"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/fleetmux/fleetmux/transport/presence"
)

// Building blocks shared by the server commands (node, controller, dev).

// stack runs the cleanups of what a server command started, last first.
type stack struct {
	mu  sync.Mutex
	fns []func()
}

func (s *stack) defer_(f func()) {
	s.mu.Lock()
	s.fns = append(s.fns, f)
	s.mu.Unlock()
}

func (s *stack) close() {
	s.mu.Lock()
	fns := s.fns
	s.fns = nil
	s.mu.Unlock()
	for _, f := range slices.Backward(fns) {
		f()
	}
}

// startTracing installs OpenTelemetry tracing as the OTEL_* variables ask (off
// unless they do: docs/observability.md) and registers its flush on st first, so it
// runs after everything else stopped and their last spans go out too.
func startTracing(ctx context.Context, st *stack, service string, log *slog.Logger) error {
	tr, err := tracing.New(ctx, tracing.Config{Service: service, Version: version, Logger: log})
	if err != nil {
		return err
	}
	if !tr.Enabled() {
		return nil
	}
	log.Info("exporting traces over OTLP/HTTP", "service", service)
	st.defer_(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			log.Warn("traces not flushed", "err", err)
		}
	})
	return nil
}

func newLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// embedOptions say where an embedded NATS server listens and whom it clusters with.
type embedOptions struct {
	listen        string
	clusterListen string
	routes        []string
	name          string   // server name (required with routes)
	tlsHosts      []string // more names for its TLS certificate
}

// embedNATS starts an embedded NATS server with JetStream under dataDir/nats, in
// operator mode with TLS from the authority a, and registers its shutdown on st.
func embedNATS(st *stack, o embedOptions, dataDir string, a *natsauth.Authority, log *slog.Logger) (*transport.Server, error) {
	srv, err := transport.StartServer(transport.ServerConfig{
		Listen: o.listen, DataDir: filepath.Join(dataDir, "nats"), JetStream: true, Auth: a, TLSHosts: o.tlsHosts,
		ClusterListen: o.clusterListen, Routes: o.routes, Name: o.name, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	st.defer_(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv, nil
}

// writeSecretFile writes data to path with mode 0600.
func writeSecretFile(path, data string) error {
	return datadir.WriteFile(path, []byte(data), 0o600) // never through a planted link
}

// connectNATS connects to url and registers the close on st.
func connectNATS(ctx context.Context, st *stack, cfg transport.NATSConfig) (*transport.Conn, error) {
	conn, err := transport.Connect(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	st.defer_(func() { conn.Close() })
	return conn, nil
}

// gossipOptions are the gossip flags of the server commands.
type gossipOptions struct {
	listen  string
	keyFile string // --gossip-key-file
	key     []byte // the key (gossipKey)
	join    []string
}

// gossipKey is the gossip key of a server command: from --gossip-key-file, else
// $FLEETMUX_GOSSIP_KEY, else DATA/keys/gossip.key (written by controller init and
// dev, and next to the .creds by enroll). Gossip never runs without one, on
// loopback neither: any local user could join a node of their own.
func gossipKey(keyFile, data string) ([]byte, error) {
	if keyFile != "" {
		key, err := gossip.ReadKey(keyFile)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key-file: %w", err)
		}
		return key, nil
	}
	if v := os.Getenv(envGossipKey); v != "" {
		key, err := gossip.ParseKey(v)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", envGossipKey, err)
		}
		return key, nil
	}
	key, err := gossip.ReadKey(gossip.KeyPath(data))
	if errors.Is(err, gossip.ErrNoKey) {
		return nil, fmt.Errorf("gossip needs a key, also on loopback, and %s has none: fleetmux controller init makes it, "+
			"fleetmux enroll hands it out (%s next to the .creds); or give --gossip-key-file FILE (hex, 0600: openssl rand -hex 32) or $%s",
			gossip.KeyPath(data), gossip.KeyFile, envGossipKey)
	}
	return key, err
}

// startGossip starts a gossip member on o.listen. It joins nobody yet: join (to
// be called once) joins the seeds and keeps them joined in the background
// (transport's KeepJoined: a seed that restarts, e.g. a controller, is joined again). A node joins only
// once it serves its NATS subjects, so that a node the cluster sees alive always
// answers. The member and its rejoin loop stop through st.
func startGossip(ctx context.Context, st *stack, name string, o gossipOptions, meta api.NodeMeta, onChange func(gossip.Member), log *slog.Logger) (g *gossip.Gossip, join func(), err error) {
	host, port, err := splitHostPort(o.listen)
	if err != nil {
		return nil, nil, usageError("--gossip-listen: %v", err)
	}
	g, err = gossip.Start(ctx, gossip.Config{
		Name: name, BindAddr: host, BindPort: port, SecretKey: o.key, Logger: log, Meta: meta, OnChange: onChange,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("gossip: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	st.defer_(func() {
		cancel()
		wg.Wait()
		g.Close()
	})
	join = func() {
		if len(o.join) == 0 {
			return
		}
		wg.Add(1)
		go func() { // owned by st: stops with cancel
			defer wg.Done()
			g.KeepJoined(rctx, o.join, 0)
		}()
	}
	return g, join, nil
}

var _ controller.Presence = (*presence.Watcher)(nil)

// observeMembers feeds gossip changes into a controller's node table.
func observeMembers(c *controller.Controller) func(gossip.Member) {
	return func(m gossip.Member) {
		c.Observe(controller.Member{Name: m.Name, Addr: m.Addr, State: m.State, Meta: m.Meta})
	}
}
