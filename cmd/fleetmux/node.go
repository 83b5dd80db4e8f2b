package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/spf13/cobra"
)

// reclaimAfter is how long a node agent's process waits after a burst of session
// starts and ends before it returns the burst's garbage to the OS (node.Config's
// ReclaimAfter): an agent of idle sessions then holds little more than they need.
const reclaimAfter = time.Second

// nodeOptions are the flags of `fleetmux node`.
type nodeOptions struct {
	name          string
	labels        []string
	data          string
	natsURL       string
	natsCreds     string
	natsCA        string
	trustRoot     string
	prefix        string
	gossipListen  string
	gossipKeyFile string
	join          []string
	maxSessions   int
	recording     recordingFlags
	verbose       bool
	holder        bool
	hideData      bool
}

func nodeCmd() *cobra.Command {
	var o nodeOptions
	c := &cobra.Command{
		Use:   "node [--name NAME] [--nats URL | (embedded)] [--data DIR] [--label k=v]...",
		Short: "Run the node agent: this host's sessions as a NATS service",
		Long: "node keeps this host's PTY sessions and serves them as the NATS micro service\n" +
			"fleetmux-node on <prefix>.rpc.<name>.<verb>; it publishes output on\n" +
			"<prefix>.out.<name>.<session> (with Fleetmux-Offset headers), block, session and\n" +
			"audit events, and records every session under DIR/sessions/<id>/.\n\n" +
			"With --nats it connects with --nats-creds (this node's .creds file from\n" +
			"`fleetmux enroll node NAME`, which also holds the CA that verifies the server).\n" +
			"Without --nats it embeds a NATS server (JetStream on, TLS, its own NATS authority\n" +
			"under DIR/keys/) on 127.0.0.1:4222 and writes its URL to DIR/nats.url and\n" +
			"credentials to DIR/creds/. With --gossip-listen it joins the memberlist cluster\n" +
			"(--join) so controllers discover it. Secrets come from files or the environment,\n" +
			"never from flags: $FLEETMUX_NATS_CREDS, $FLEETMUX_GOSSIP_KEY or --gossip-key-file\n" +
			"(gossip always needs its key, on loopback too: default DIR/keys/gossip.key).",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return o.run(c.Context(), c.ErrOrStderr()) },
	}
	host, _ := os.Hostname()
	f := c.Flags()
	f.StringVar(&o.name, "name", sanitizeName(host), "node name (A-Z a-z 0-9 _ -)")
	f.StringSliceVar(&o.labels, "label", nil, "label k=v (repeatable)")
	f.StringVar(&o.data, "data", ".fleetmux", "data directory: recordings, session ids, embedded NATS store")
	f.StringVar(&o.natsURL, "nats", "", "NATS server URL(s); empty: embed one on 127.0.0.1:4222")
	f.StringVar(&o.natsCreds, "nats-creds", "", "NATS .creds file of this node (fleetmux enroll node NAME; default $FLEETMUX_NATS_CREDS)")
	f.StringVar(&o.natsCA, "nats-ca", "", "PEM CA that verifies the NATS server (default: the CA in the .creds file)")
	f.StringVar(&o.trustRoot, "trust-root", "", "the fleet root's public key(s) that sign controller certificates (default DIR/keys/fleet.pub)")
	f.StringVar(&o.prefix, "prefix", api.DefaultPrefix, "NATS subject prefix")
	f.StringVar(&o.gossipListen, "gossip-listen", "", "gossip address host:port (e.g. 127.0.0.1:7946); empty: no gossip")
	f.StringVar(&o.gossipKeyFile, "gossip-key-file", "", "file holding the gossip encryption key, hex (16, 24 or 32 bytes; fleetmux enroll writes one; default $FLEETMUX_GOSSIP_KEY, else DIR/keys/gossip.key); gossip needs one, on loopback too")
	f.StringSliceVar(&o.join, "join", nil, "gossip seed addresses host:port")
	f.IntVar(&o.maxSessions, "max-sessions", api.DefaultMaxSessions, "sessions alive at once")
	o.recording.add(f)
	f.BoolVar(&o.verbose, "verbose", false, "debug logs")
	f.BoolVar(&o.hideData, "hide-data-dir", false, "keep every session out of DIR and the --nats-creds file also where the node can make no mounts for it (no root, no user namespaces), by Landlock alone (otherwise it always does; docs/sandbox.md: DIR then belongs in a directory of its own, e.g. /var/lib/fleetmux)")
	f.BoolVar(&o.holder, "holder", true, "keep the sessions in a holder process (DIR/holder/holder.sock; started detached when none runs) so they outlive this agent: a stop or crash of the agent leaves them running and the next agent reattaches; --holder=false keeps them in the agent (they end with it)")
	return c
}

// sanitizeName turns a host name into a valid node name.
func sanitizeName(h string) string {
	h, _, _ = strings.Cut(h, ".")
	var b strings.Builder
	for _, r := range h {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "node"
	}
	return b.String()
}

func (o *nodeOptions) run(ctx context.Context, stderr io.Writer) error {
	stderr = &lockedWriter{w: stderr} // logs come from many goroutines
	log := newLogger(stderr, o.verbose)
	if err := api.ValidName(o.name); err != nil {
		return usageError("--name: %v", err)
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return err
	}
	if err := datadir.Ensure(o.data); err != nil {
		return err
	}
	var st stack
	defer st.close()
	if err := startTracing(ctx, &st, "fleetmux-node", log); err != nil {
		return err
	}
	if o.natsCreds == "" { // read here, not as the flag's default (see TestNoSecretInFlagDefaults)
		o.natsCreds = os.Getenv(api.EnvNATSCreds)
	}
	var gkey []byte
	if o.gossipListen != "" {
		if gkey, err = gossipKey(o.gossipKeyFile, o.data); err != nil {
			return err
		}
	}
	natsCfg := transport.NATSConfig{URL: o.natsURL, CredsFile: o.natsCreds, CAFile: o.natsCA, Name: "fleetmux-node " + o.name, Logger: log}
	if o.natsURL == "" {
		if o.natsCreds != "" {
			return usageError("--nats-creds needs --nats (without it the node embeds its own server)")
		}
		auth, err := openAuthority(o.data)
		if err != nil {
			return err
		}
		srv, err := embedNATS(&st, embedOptions{listen: transport.DefaultServerListen}, o.data, auth, log)
		if err != nil {
			return err
		}
		nodeCreds, ctlCreds, err := devCreds(auth, o.data, o.prefix, o.name, "controller-"+o.name)
		if err != nil {
			return err
		}
		natsCfg.URL, natsCfg.Creds = srv.ClientURL(), nodeCreds
		if _, err := writeURLFile(o.data, "nats.url", natsCfg.URL); err != nil {
			return err
		}
		// The streams are set up by a controller's identity: a node may not.
		setup, err := transport.Connect(ctx, transport.NATSConfig{URL: natsCfg.URL, Creds: ctlCreds, Name: "fleetmux-node setup", Logger: log})
		if err != nil {
			return fmt.Errorf("nats: %w", err)
		}
		err = ensureStreams(ctx, nil, setup, o.prefix, 1, 10*time.Second, log)
		setup.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "embedded NATS at %s (written to %s; credentials in %s)\n", natsCfg.URL, filepath.Join(o.data, "nats.url"), filepath.Join(o.data, "creds"))
	} else if o.natsCreds == "" {
		return usageError("--nats needs --nats-creds FILE or $FLEETMUX_NATS_CREDS (fleetmux enroll node %s)", o.name)
	}
	verifier, err := loadVerifier(o.trustRoot, o.data, o.name)
	if err != nil {
		return err
	}
	conn, err := connectNATS(ctx, &st, natsCfg)
	if err != nil {
		return err
	}
	exposed := o.gossipListen != "" && !api.IsLoopbackAddr(o.gossipListen)
	hc, err := ensureHolder(ctx, &st, o.holder, o.data)
	if err != nil {
		return err
	}
	n, err := startNode(ctx, &st, conn, o.recording.apply(node.Config{Name: o.name, Labels: labels, DataDir: o.data, Prefix: o.prefix, MaxSessions: o.maxSessions, Verifier: verifier, Logger: log, Exposed: exposed, Holder: hc, ReclaimAfter: reclaimAfter, HideDataDir: o.hideData, Hide: []string{natsCfg.CredsFile}}),
		gossipOptions{listen: o.gossipListen, key: gkey, join: o.join})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "node %s serving on %s\n", o.name, api.Subjects{Prefix: o.prefix}.RPC(o.name, "*"))
	<-ctx.Done()
	return n.Close()
}

// ensureStreams sets up (or raises to replicas copies) the JetStream streams,
// waiting up to wait. A server without JetStream is an error naming the
// configuration it needs. Other failures (a JetStream cluster still electing,
// or without a quorum) are logged; with st, the setup then goes on in the
// background until it succeeds or st closes, so that a controller serves while
// JetStream is away.
func ensureStreams(ctx context.Context, st *stack, conn *transport.Conn, prefix string, replicas int, wait time.Duration, log *slog.Logger) error {
	setup := func(ctx context.Context, d time.Duration) error {
		sctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return transport.EnsureStreams(sctx, conn.NC(), prefix, transport.StreamLimits{Replicas: replicas})
	}
	err := setup(ctx, wait)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrNoJetStream):
		return fmt.Errorf("%w: fleetmux keeps output, events, tokens and policy in JetStream; add `jetstream {}` (with a store_dir) to the server's configuration", err)
	case errors.Is(err, transport.ErrNoStorage):
		return fmt.Errorf("%w: the streams reserve 1.5 GiB on every server that keeps a copy; give each server's `jetstream {}` a max_file_store of 2GB or more", err)
	case st == nil:
		log.Warn("jetstream streams not set up", "err", err)
		return nil
	}
	log.Warn("jetstream streams not set up yet; retrying in the background", "err", err)
	bctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // owned by st: stops when it closes
		defer close(done)
		for {
			if err := setup(bctx, 30*time.Second); err == nil {
				log.Info("jetstream streams set up")
				return
			}
			t := time.NewTimer(time.Second)
			select {
			case <-bctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	st.defer_(func() { cancel(); <-done })
	return nil
}

// startNode starts a node agent on conn (and, with g.listen, in the gossip
// cluster, which it joins once it serves: alive means answering). Its Close is
// registered on st; the caller may call it earlier.
func startNode(ctx context.Context, st *stack, conn *transport.Conn, cfg node.Config, g gossipOptions) (*node.Node, error) {
	cfg.Bus, cfg.Version = conn, buildVersion()
	cfg.Policy = transport.NewPolicyReader(conn.NC(), cfg.Logger)
	join := func() {}
	if g.listen != "" {
		gs, j, err := startGossip(ctx, st, cfg.Name, g,
			api.NodeMeta{Name: cfg.Name, Labels: cfg.Labels, Version: cfg.Version, Proto: api.ProtocolVersion}, nil, cfg.Logger)
		if err != nil {
			return nil, err
		}
		cfg.Gossip, join = gs, j
	}
	n, err := node.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.Start(); err != nil {
		n.Close()
		return nil, err
	}
	st.defer_(func() { n.Close() })
	join()
	return n, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
