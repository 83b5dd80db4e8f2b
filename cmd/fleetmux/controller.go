package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/mcpserver"
	"github.com/fleetmux/fleetmux/sshd"
	"github.com/fleetmux/fleetmux/tracing"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/gossip"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/fleetmux/fleetmux/transport/presence"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// controllerOptions are the flags of `fleetmux controller`.
type controllerOptions struct {
	name         string
	data         string
	httpListen   string
	apiToken     string
	apiTokenFile string
	natsURL      string
	jsReplicas   int
	natsCreds    string
	natsCA       string
	natsListen   string
	natsCluster  string
	natsRoutes   []string
	natsTLSHosts []string
	signingKey   string
	signingCert  string
	prefix       string
	gossip       gossipOptions
	ssh          sshOptions
	verbose      bool
}

// sshOptions are the SSH front door's flags.
type sshOptions struct {
	listen         string
	authorizedKeys string
	defaultRole    string
}

func (o *sshOptions) register(f *pflag.FlagSet, defaultRole string) {
	home, _ := os.UserHomeDir()
	f.StringVar(&o.listen, "ssh-listen", sshd.DefaultListen, "SSH front door address; \"off\" disables it")
	f.StringVar(&o.authorizedKeys, "authorized-keys", filepath.Join(home, ".ssh", "authorized_keys"),
		"authorized_keys file of the SSH front door: each key's role from a role=viewer|operator|admin option (never the comment)")
	o.defaultRole = defaultRole
}

func controllerCmd() *cobra.Command {
	var o controllerOptions
	c := &cobra.Command{
		Use:   "controller [--nats URL | --nats-listen ADDR] [--http-listen ADDR] [--gossip-listen ADDR --join SEED]...",
		Short: "Run a controller: the node table from gossip and the HTTP API to every session",
		Long: "controller joins the gossip cluster of the node agents, keeps a table of the nodes\n" +
			"(alive, suspect, disconnected, dead: from gossip and their NATS connections),\n" +
			"and serves the HTTP API (/v1/..., docs/api.md) on\n" +
			"--http-listen, routing each request to its node over NATS. It keeps no state of\n" +
			"its own: run several, restart them at will.\n\n" +
			"NATS: --nats URL connects to an existing server (or cluster); --nats-listen ADDR\n" +
			"embeds one (JetStream on) for the nodes to connect to, --nats-routes clusters the\n" +
			"embedded servers of several controllers (mutual TLS on --nats-cluster-listen).\n" +
			"The embedded server runs with the NATS authority in --data (made by `fleetmux\n" +
			"controller init`, or on first start): only enrolled users connect, over TLS.\n" +
			"With --nats, --nats-creds is this controller's .creds file (fleetmux enroll\n" +
			"controller NAME). Gossip always needs its key (DIR/keys/gossip.key from controller\n" +
			"init, or --gossip-key-file); beyond loopback the HTTP API needs --api-token.",
		Example: "  fleetmux controller init --data /var/lib/fleetmux\n" +
			"  fleetmux controller --data /var/lib/fleetmux --nats-listen 0.0.0.0:4222 --gossip-listen 127.0.0.1:7946\n" +
			"  fleetmux controller --nats nats://10.0.0.2:4222 --nats-creds ctl.creds --http-listen 0.0.0.0:7070 \\\n" +
			"      --api-token-file /etc/fleetmux/token --gossip-listen 10.0.0.1:7946 --gossip-key-file ctl.keys/gossip.key --join 10.0.0.5:7946",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return o.run(c.Context(), c.OutOrStdout(), c.ErrOrStderr()) },
	}
	f := c.Flags()
	f.StringVar(&o.name, "name", "controller-"+sanitizeName(hostname()), "controller name in the gossip cluster and its audit subject")
	f.StringVar(&o.data, "data", ".fleetmux-controller", "data directory: the NATS authority (keys/), the embedded NATS store")
	f.StringVar(&o.httpListen, "http-listen", httpapi.DefaultListen, "HTTP API address")
	f.StringVar(&o.apiToken, "api-token", "", "a bootstrap admin API token, beside the tokens of FLEETMUX_TOKENS (default $FLEETMUX_TOKEN; prefer it or --api-token-file: flags show in ps)")
	f.StringVar(&o.apiTokenFile, "api-token-file", "", "file holding the bootstrap admin API token")
	f.StringVar(&o.natsURL, "nats", "", "NATS server URL(s) to connect to")
	f.StringVar(&o.natsCreds, "nats-creds", "", "NATS .creds file of this controller (fleetmux enroll controller NAME; default $FLEETMUX_NATS_CREDS)")
	f.StringVar(&o.natsCA, "nats-ca", "", "PEM CA that verifies the NATS server (default: the CA in the .creds file)")
	f.IntVar(&o.jsReplicas, "js-replicas", 0, "copies of the JetStream streams and buckets (default: the NATS cluster's servers, at most 3; existing ones are raised to it)")
	f.StringVar(&o.natsListen, "nats-listen", "", "embed a NATS server (JetStream on) on this address")
	f.StringVar(&o.natsCluster, "nats-cluster-listen", "", "cluster (route) listener of the embedded NATS server (default: the --nats-listen host, port 6222, when --nats-routes is set)")
	f.StringSliceVar(&o.natsRoutes, "nats-routes", nil, "cluster routes of the embedded NATS server: nats://HOST:PORT of the others' cluster listeners")
	f.StringSliceVar(&o.natsTLSHosts, "nats-tls-host", nil, "more names for the embedded NATS server's TLS certificate (the names nodes use to reach it)")
	f.StringVar(&o.signingKey, "signing-key", "", "the controller's private key (0600) that signs node requests (default DIR/keys/controller.key)")
	f.StringVar(&o.signingCert, "signing-cert", "", "its certificate, issued by the fleet root (default DIR/keys/controller.cert)")
	f.StringVar(&o.prefix, "prefix", api.DefaultPrefix, "NATS subject prefix")
	f.StringVar(&o.gossip.listen, "gossip-listen", "127.0.0.1:7946", "gossip address host:port")
	f.StringVar(&o.gossip.keyFile, "gossip-key-file", "", "file holding the gossip encryption key, hex (default $FLEETMUX_GOSSIP_KEY, else DIR/keys/gossip.key, which controller init writes); gossip needs one, on loopback too")
	f.StringSliceVar(&o.gossip.join, "join", nil, "gossip seed addresses host:port (nodes or other controllers)")
	o.ssh.register(f, api.RoleViewer)
	f.BoolVar(&o.verbose, "verbose", false, "debug logs")
	c.AddCommand(controllerInitCmd())
	return c
}

// exposed reports whether the controller's HTTP API, SSH front door, embedded
// NATS or gossip listens beyond loopback.
func (o *controllerOptions) exposed() bool {
	for _, addr := range []string{o.httpListen, o.ssh.listen, o.natsListen, o.gossip.listen} {
		if addr != "" && addr != "off" && !api.IsLoopbackAddr(addr) {
			return true
		}
	}
	return false
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

func (o *controllerOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	stderr = &lockedWriter{w: stderr}
	log := newLogger(stderr, o.verbose)
	if err := api.ValidName(o.name); err != nil {
		return usageError("--name: %v", err)
	}
	if o.natsURL != "" && o.natsListen != "" {
		return usageError("--nats and --nats-listen: use one (connect to a server, or embed one)")
	}
	if o.jsReplicas < 0 || o.jsReplicas > 5 {
		return usageError("--js-replicas %d: want 1 to 5 (JetStream's limit), or 0 for the cluster's size up to 3", o.jsReplicas)
	}
	// Secrets from the environment are read here, never as flag defaults: cobra
	// prints those in help.
	token := o.apiToken
	if token == "" {
		token = os.Getenv(envToken)
	}
	if o.natsCreds == "" {
		o.natsCreds = os.Getenv(api.EnvNATSCreds)
	}
	if o.apiTokenFile != "" {
		b, err := os.ReadFile(o.apiTokenFile)
		if err != nil {
			return fmt.Errorf("--api-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if err := datadir.Ensure(o.data); err != nil {
		return err
	}
	var st stack
	defer st.close()
	if err := startTracing(ctx, &st, "fleetmux-controller", log); err != nil {
		return err
	}
	url := o.natsURL
	natsCfg := transport.NATSConfig{CredsFile: o.natsCreds, CAFile: o.natsCA, Name: "fleetmux-controller " + o.name, Logger: log}
	var auth *natsauth.Authority
	if url == "" {
		var err error
		if auth, err = openAuthority(o.data); err != nil {
			return err
		}
		listen := o.natsListen
		if listen == "" {
			listen = transport.DefaultServerListen
		}
		cluster := o.natsCluster
		if cluster == "" && len(o.natsRoutes) > 0 {
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return usageError("--nats-listen %q: %v", listen, err)
			}
			cluster = net.JoinHostPort(host, "6222")
		}
		srv, err := embedNATS(&st, embedOptions{listen: listen, clusterListen: cluster, routes: o.natsRoutes, name: o.name, tlsHosts: o.natsTLSHosts}, o.data, auth, log)
		if err != nil {
			return err
		}
		url = srv.ClientURL()
		fmt.Fprintf(stderr, "embedded NATS at %s (TLS; CA %s)\n", url, filepath.Join(o.data, natsauth.AuthorityDir, natsauth.CACertFile))
	} else if o.natsCreds == "" {
		// A controller may run where its fleet's authority lives, without a .creds file.
		a, err := natsauth.LoadAuthority(o.data)
		if err != nil {
			return usageError("--nats needs --nats-creds FILE (fleetmux enroll controller %s) or the fleet's authority in --data: %v", o.name, err)
		}
		auth = a
	}
	if o.natsCreds == "" {
		creds, err := auth.Issue(natsauth.Identity{Kind: natsauth.KindController, Name: o.name, Prefix: o.prefix})
		if err != nil {
			return err
		}
		natsCfg.Creds = creds
	}
	natsCfg.URL = url
	conn, err := connectNATS(ctx, &st, natsCfg)
	if err != nil {
		return err
	}
	// The streams and buckets, on an embedded server or the operator's own: with
	// as many copies as the cluster has servers (at most 3) unless told.
	replicas := transport.Replicas(conn.NC(), o.jsReplicas)
	if err := ensureStreams(ctx, &st, conn, o.prefix, replicas, 3*time.Second, log); err != nil {
		return err
	}
	if o.signingKey == "" && o.signingCert == "" {
		if err := selfEnroll(o.data, o.name); err != nil {
			return err
		}
	}
	signer, err := loadSigner(o.signingKey, o.signingCert, o.data, o.name)
	if err != nil {
		return err
	}
	if o.gossip.key, err = gossipKey(o.gossip.keyFile, o.data); err != nil {
		return err
	}
	tokens := openTokens(conn, log).WithReplicas(replicas)
	c, _, err := startController(ctx, &st, conn, controller.Config{Name: o.name, Prefix: o.prefix, Token: token, Tokens: tokens,
		Policy: transport.NewPolicy(conn.NC(), log).WithReplicas(replicas), Exposed: o.exposed(), Signer: signer, Logger: log,
		AuditFile: filepath.Join(o.data, "audit.jsonl")}, o.httpListen, o.gossip)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "HTTP API: http://%s\n", c.Addr())
	if sshAddr, err := startSSH(&st, c, o.ssh, o.data, log); err != nil {
		return err
	} else if sshAddr != "" {
		fmt.Fprintf(stdout, "SSH: %s\n", sshAddr)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Shutdown(sctx)
}

// ctl is a running controller and its HTTP API.
type ctl struct {
	*controller.Controller
	api *httpapi.Server
}

// Addr is the HTTP API's address.
func (c ctl) Addr() string { return c.api.Addr() }

// Shutdown stops the HTTP API (requests in flight get until ctx is done), then
// the controller.
func (c ctl) Shutdown(ctx context.Context) error {
	err := c.api.Shutdown(ctx)
	c.Controller.Close()
	return err
}

// startController starts a controller on conn in the gossip cluster, and its HTTP
// API (with /mcp) on httpListen; their shutdown is registered on st.
func startController(ctx context.Context, st *stack, conn *transport.Conn, cfg controller.Config, httpListen string, g gossipOptions) (ctl, *gossip.Gossip, error) {
	cfg.Bus = conn
	// Node liveness from gossip and the nodes' NATS connections (advisories and the
	// account's connection list): a killed agent is seen at once, a starved one
	// is never dead, and a gossip member no node identity backs is never alive.
	cfg.Presence = presence.New(conn, presence.Config{Logger: cfg.Logger})
	cfg.Registry = prometheus.NewRegistry() // the controller's metrics and its API's, on /metrics
	// Subscribers' pull consumers: no identity but a controller creates one.
	stopConsumers, err := conn.ServeConsumers(cfg.Prefix)
	if err != nil {
		return ctl{}, nil, err
	}
	st.defer_(func() { _ = stopConsumers() })
	c, err := controller.New(cfg)
	if err != nil {
		return ctl{}, nil, err
	}
	h, err := httpapi.New(httpapi.Config{Listen: httpListen, Fleet: c, MCP: mcpOver(c, buildVersion(), cfg.Logger), Registry: cfg.Registry, Logger: cfg.Logger})
	if err != nil {
		return ctl{}, nil, err
	}
	gs, join, err := startGossip(ctx, st, cfg.Name, g, api.NodeMeta{Name: cfg.Name, Version: buildVersion(), Proto: api.ProtocolVersion, Role: api.RoleController},
		observeMembers(c), cfg.Logger)
	if err != nil {
		return ctl{}, nil, err
	}
	if err := c.Start(); err != nil {
		return ctl{}, nil, err
	}
	st.defer_(func() { c.Close() })
	if err := h.Start(); err != nil {
		return ctl{}, nil, err
	}
	st.defer_(func() { h.Close() }) // before the controller's
	join()
	return ctl{Controller: c, api: h}, gs, nil
}

// mcpOver builds the MCP server of /mcp over the controller: tool calls act with
// the role of the request's API token (each tool needs the role api.Tools gives
// it), are labelled "mcp:CLIENT@ADDR", and are audited with both.
func mcpOver(c *controller.Controller, version string, log *slog.Logger) func(httpapi.MCPOptions) (http.Handler, httpapi.MCPServer) {
	return func(o httpapi.MCPOptions) (http.Handler, httpapi.MCPServer) {
		m := mcpserver.New(c, mcpserver.Options{
			Version:   version,
			Context:   o.Context,
			Logger:    log,
			WithActor: controller.WithActor,
			WithCaller: func(ctx context.Context, principal, role string) context.Context {
				return c.WithCaller(ctx, "", principal, role)
			},
			Audit: func(_ context.Context, rec api.AuditRecord) { c.Audit(rec) },
		})
		return m.Handler(mcpserver.HTTPOptions{Closing: o.Closing, Caller: o.Caller}), m
	}
}

// writeURLFile writes a URL file into the data dir (0600: it may hold credentials).
func writeURLFile(data, name, url string) (string, error) {
	p := filepath.Join(data, name)
	return p, writeSecretFile(p, url+"\n")
}

// sshExec runs the CLI verbs for the SSH front door against the controller's own
// HTTP API (so a verb over SSH prints and exits exactly as in a terminal), with
// sshRun: the SSH user reaches neither the server verbs nor this process's
// environment, files or flag defaults. Each verb acts with a local token of the
// SSH user's key and role (controller.LocalToken), revoked when it ends: the API
// checks the role and audits the key.
// The controller is every front door's Fleet, under the doors' own names.
var (
	_ httpapi.Fleet   = (*controller.Controller)(nil)
	_ sshd.Fleet      = (*controller.Controller)(nil)
	_ mcpserver.Fleet = (*controller.Controller)(nil)
)

func sshExec(c ctl) sshd.Exec {
	return func(ctx context.Context, args []string, role, actor string, stdin io.Reader, stdout, stderr io.Writer) int {
		token, revoke := c.LocalToken(actor, role)
		defer revoke()
		ctx, span := sshSpan(ctx, args, actor)
		defer span.End()
		err := sshRun(ctx, frontDoor{addr: "http://" + c.Addr(), token: token, actor: actor}, args, stdin, stdout, stderr)
		report(stderr, err)
		code := exitCode(err)
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("process.exit.code", code))
			if code != 0 {
				span.SetStatus(codes.Error, "exit code "+strconv.Itoa(code))
			}
		}
		return code
	}
}

// sshSpan starts the span of one verb run over SSH ("ssh VERB"); the verb's API
// requests carry its trace context (frontDoor). Off: ctx and a no-op span.
func sshSpan(ctx context.Context, args []string, actor string) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	verb := "?"
	if len(args) > 0 {
		verb = args[0]
		if api.ValidName(verb) != nil {
			verb = "?" // a name as typed goes into no span name
		}
	}
	return tracing.Start(ctx, "ssh "+verb, trace.SpanKindServer, attribute.String("fleetmux.principal", actor))
}

// openTokens is the FLEETMUX_TOKENS bucket of a controller: bound (created when
// missing) when the controller starts, after its gossip listens.
func openTokens(conn *transport.Conn, log *slog.Logger) *transport.KV {
	return transport.NewKV(conn.NC(), api.BucketTokens, log)
}

// startSSH starts the SSH front door unless it is off or there are no authorized
// keys (then it says so and returns ""). Its Close is registered on st.
func startSSH(st *stack, c ctl, o sshOptions, data string, log *slog.Logger) (string, error) {
	if o.listen == "" || o.listen == "off" {
		return "", nil
	}
	if _, err := os.Stat(o.authorizedKeys); err != nil {
		log.Warn("SSH front door off: no authorized keys file", "path", o.authorizedKeys)
		return "", nil
	}
	s, err := sshd.Start(sshd.Config{
		Listen: o.listen, HostKeyFile: filepath.Join(data, "ssh_host_ed25519_key"), AuthorizedKeys: o.authorizedKeys,
		DefaultRole: o.defaultRole, Exec: sshExec(c), Fleet: c.Controller, Logger: log,
	})
	if err != nil {
		return "", err
	}
	st.defer_(func() { s.Close() })
	return s.Addr(), nil
}
