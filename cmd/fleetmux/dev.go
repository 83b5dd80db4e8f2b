package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/gossip"
	"github.com/spf13/cobra"
)

// devOptions are the flags of `fleetmux dev`.
type devOptions struct {
	data         string
	name         string
	httpListen   string
	natsListen   string
	gossipListen string
	prefix       string
	ssh          sshOptions
	recording    recordingFlags
	maxSessions  int
	verbose      bool
	holder       bool
}

func devCmd() *cobra.Command {
	var o devOptions
	c := &cobra.Command{
		Use:   "dev [--data DIR] [--http-listen ADDR] [--nats-listen ADDR] [--gossip-listen ADDR]",
		Short: "Run the whole system on this machine: NATS, a controller and a node",
		Long: "dev starts, in one process and all on loopback, an embedded NATS server with\n" +
			"JetStream, a controller serving the HTTP API, and a node agent for this host,\n" +
			"joined over gossip. Data lives under --data. The first start sets up the NATS\n" +
			"authority there (operator, account, TLS CA: DIR/keys/); NATS clients need\n" +
			"credentials and TLS even on loopback.\n\n" +
			"The HTTP API needs a token even on loopback: dev keeps an admin token in\n" +
			"DIR/token (0600) and writes the API's address and that token to\n" +
			"$XDG_CONFIG_HOME/fleetmux/dev.json (default ~/.config/fleetmux/dev.json, 0600),\n" +
			"where the CLI and fleetmux mcp find them when no --addr/--token or\n" +
			"FLEETMUX_ADDR/FLEETMUX_TOKEN is set, from any directory.\n\n" +
			"It prints the HTTP API address, writes the NATS URL to DIR/nats.url and the\n" +
			"credentials (each with the CA) to DIR/creds/{node,controller,subscriber}.creds\n" +
			"(mode 0600) for any NATS client.\n\n" +
			"Sessions live in a holder process (DIR/holder/), not in dev: Ctrl-C stops dev,\n" +
			"and the sessions keep running; dev says which on its way out. A later fleetmux\n" +
			"dev on the same --data reattaches them; fleetmux dev stop ends them and the\n" +
			"holder. With --holder=false the sessions end with dev. Recordings stay under\n" +
			"DIR/sessions/ either way.\n\n" +
			"Then, in another terminal: fleetmux new; fleetmux run NODE/ID -- 'echo hi'.",
		Example: "  fleetmux dev\n  fleetmux dev --http-listen 127.0.0.1:0 --nats-listen 127.0.0.1:0 --gossip-listen 127.0.0.1:0",
		Args:    cobra.NoArgs,
		RunE:    func(c *cobra.Command, _ []string) error { return o.run(c.Context(), c.OutOrStdout(), c.ErrOrStderr()) },
	}
	f := c.Flags()
	f.StringVar(&o.data, "data", ".fleetmux", "data directory")
	f.StringVar(&o.name, "name", sanitizeName(hostname()), "node name of this host")
	f.StringVar(&o.httpListen, "http-listen", httpapi.DefaultListen, "HTTP API address (loopback)")
	f.StringVar(&o.natsListen, "nats-listen", transport.DefaultServerListen, "embedded NATS address (loopback)")
	f.StringVar(&o.gossipListen, "gossip-listen", "127.0.0.1:7946", "the controller's gossip address (loopback; the node takes a free port)")
	f.StringVar(&o.prefix, "prefix", api.DefaultPrefix, "NATS subject prefix")
	o.ssh.register(f, api.RoleAdmin) // on one's own machine, one's own keys are admins
	o.recording.add(f)
	f.IntVar(&o.maxSessions, "max-sessions", api.DefaultMaxSessions, "sessions alive at once")
	f.BoolVar(&o.verbose, "verbose", false, "debug logs")
	c.AddCommand(devStopCmd())
	f.BoolVar(&o.holder, "holder", true, "keep the sessions in a holder process (DIR/holder/holder.sock; started detached when none runs) so they outlive this process: a later fleetmux dev on the same --data reattaches them; --holder=false keeps them in this process (they end with it)")
	return c
}

func (o *devOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	stderr = &lockedWriter{w: stderr}
	log := newLogger(stderr, o.verbose)
	if err := api.ValidName(o.name); err != nil {
		return usageError("--name: %v", err)
	}
	listeners := map[string]string{"--http-listen": o.httpListen, "--nats-listen": o.natsListen, "--gossip-listen": o.gossipListen}
	if o.ssh.listen != "off" && o.ssh.listen != "" {
		listeners["--ssh-listen"] = o.ssh.listen
	}
	for flag, addr := range listeners {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return usageError("%s %q: %v", flag, addr, err)
		}
		if !api.IsLoopbackHost(host) {
			return usageError("%s %s: dev listens on loopback only (use fleetmux controller and fleetmux node beyond it)", flag, addr)
		}
	}
	if err := datadir.Ensure(o.data); err != nil {
		return err
	}
	gkey, err := gossip.EnsureKey(o.data) // made once, kept (0600)
	if err != nil {
		return err
	}
	ctlName := "controller-" + o.name
	signer, verifier, err := devTrust(o.data, ctlName)
	if err != nil {
		return err
	}
	var exitNote strings.Builder // printed last, after the stack's own logs
	defer func() { fmt.Fprint(stderr, exitNote.String()) }()
	var st stack
	defer st.close()
	if err := startTracing(ctx, &st, "fleetmux", log); err != nil {
		return err
	}
	auth, err := openAuthority(o.data)
	if err != nil {
		return err
	}
	srv, err := embedNATS(&st, embedOptions{listen: o.natsListen}, o.data, auth, log)
	if err != nil {
		return err
	}
	natsFile, err := writeURLFile(o.data, "nats.url", srv.ClientURL())
	if err != nil {
		return err
	}
	nodeCreds, ctlCreds, err := devCreds(auth, o.data, o.prefix, o.name, ctlName)
	if err != nil {
		return err
	}
	conn, err := connectNATS(ctx, &st, transport.NATSConfig{URL: srv.ClientURL(), Creds: ctlCreds, Name: "fleetmux-dev " + ctlName, Logger: log})
	if err != nil {
		return err
	}
	nodeConn, err := connectNATS(ctx, &st, transport.NATSConfig{URL: srv.ClientURL(), Creds: nodeCreds, Name: "fleetmux-dev node " + o.name, Logger: log})
	if err != nil {
		return err
	}
	if err := ensureStreams(ctx, nil, conn, o.prefix, 1, 10*time.Second, log); err != nil {
		return err
	}
	token, err := devToken(o.data)
	if err != nil {
		return err
	}
	tokens := openTokens(conn, log)
	c, g, err := startController(ctx, &st, conn, controller.Config{Name: ctlName, Prefix: o.prefix, Signer: signer, Logger: log,
		Token: token, Tokens: tokens, Policy: transport.NewPolicy(conn.NC(), log), AuditFile: filepath.Join(o.data, "audit.jsonl"),
		Exposed: !api.IsLoopbackAddr(o.httpListen)},
		o.httpListen, gossipOptions{listen: o.gossipListen, key: gkey})
	if err != nil {
		return err
	}
	hc, err := ensureHolder(ctx, &st, o.holder, o.data)
	if err != nil {
		return err
	}
	// dev.json holds the admin token too: its directory is kept out of every
	// session as the data dir is (it must exist before the first session).
	devPath, err := client.DevConfigPath()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(devPath), 0o700); err != nil {
		return fmt.Errorf("dev config: %w", err)
	}
	n, err := startNode(ctx, &st, nodeConn, o.recording.apply(node.Config{Name: o.name, DataDir: o.data, Prefix: o.prefix, MaxSessions: o.maxSessions, Verifier: verifier, Logger: log, Holder: hc, ReclaimAfter: reclaimAfter,
		Hide: []string{filepath.Dir(devPath)}}),
		gossipOptions{listen: "127.0.0.1:0", key: gkey, join: []string{g.Addr()}})
	if err != nil {
		return err
	}
	if err := waitNodeAlive(ctx, c.Controller, o.name); err != nil {
		return err
	}
	sshAddr, err := startSSH(&st, c, o.ssh, o.data, log)
	if err != nil {
		return err
	}
	sshLine := "off (no " + o.ssh.authorizedKeys + ")"
	if sshAddr != "" {
		host, port, _ := net.SplitHostPort(sshAddr)
		sshLine = fmt.Sprintf("ssh -p %s %s   (keys of %s are admins)", port, host, o.ssh.authorizedKeys)
	}
	httpURL := "http://" + c.Addr()
	if _, err := writeURLFile(o.data, "http.url", httpURL); err != nil {
		return err
	}
	absData, err := filepath.Abs(o.data)
	if err != nil {
		return err
	}
	cfgFile, err := writeDevConfig(devConfig{Addr: httpURL, Token: token, Data: absData})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fleetmux dev is up\n"+
		"  HTTP API  %s   (admin token in %s; the CLI finds both in %s)\n"+
		"  NATS      %s   (URL in %s; credentials, with the CA, in %s)\n"+
		"  node      %s   (data in %s)\n"+
		"  SSH       %s\n"+
		"  policy    %s\n"+
		"try: fleetmux new, then fleetmux run %s/s1 -- 'echo hi; (exit 3)'\n",
		httpURL, filepath.Join(o.data, "token"), cfgFile, srv.ClientURL(), natsFile, filepath.Join(o.data, "creds", "{node,controller,subscriber}.creds"), o.name, o.data, sshLine,
		policyLine(ctx, c.Controller), o.name)
	<-ctx.Done()
	fmt.Fprintln(stderr, "fleetmux dev: stopping")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.Shutdown(sctx)
	err = n.Close()
	devExitNote(&exitNote, hc, o.data)
	return err
}

// policyLine is the banner's word on the guardrail policy.
func policyLine(ctx context.Context, c *controller.Controller) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pi, err := c.Policy(ctx)
	switch {
	case err != nil:
		return "unknown (" + err.Error() + ")"
	case pi.Version == 0:
		return "none: every command is allowed (set one: fleetmux policy set FILE)"
	}
	return fmt.Sprintf("version %d, %d rules (fleetmux policy show)", pi.Version, pi.Rules)
}

// waitNodeAlive waits until the controller sees the node, so that the first
// request after "dev is up" finds it.
func waitNodeAlive(ctx context.Context, c *controller.Controller, name string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		nodes, _ := c.Nodes(ctx)
		for _, n := range nodes.Nodes {
			if n.Name == name && n.Status == api.NodeAlive {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("the node did not show up in the controller's node table within 10s")
}
