package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// TestControllerNeedsJetStream: a controller pointed at a NATS server without
// JetStream exits at once, naming the configuration to add (it sat silent for
// 30 s, without its HTTP API, and exited with "token store: … jetstream not
// enabled").
func TestControllerNeedsJetStream(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := runArgs(t, "controller", "init", "--data", dir); err != nil {
		t.Fatal(err)
	}
	auth, err := natsauth.LoadAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := transport.StartServer(transport.ServerConfig{Listen: "127.0.0.1:0", Auth: auth, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.StopNATS(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb testutil.Buffer
	err = run(ctx, []string{"controller", "--name", "c1", "--data", dir, "--nats", srv.ClientURL(),
		"--http-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0", "--ssh-listen", "off"}, &out, &errb)
	if ctx.Err() != nil || err == nil || !strings.Contains(err.Error(), "jetstream {}") {
		t.Fatalf("controller on a server without JetStream: %v (ctx %v)\n%s", err, ctx.Err(), errb.String())
	}
	if strings.Contains(out.String(), "HTTP API") {
		t.Errorf("it served before it failed:\n%s", out.String())
	}
}

// TestControllerJetStreamCluster: a controller on the operator's own
// three-server JetStream cluster (--nats) creates the streams and buckets with
// three copies, raising a stream an older controller made with one; with one
// of the three servers gone, tokens and the policy are still written. Before,
// with --nats nothing was created, and the buckets kept one copy on whichever
// server made them.
func TestControllerJetStreamCluster(t *testing.T) {
	needBash(t)
	dir := t.TempDir()
	if _, _, err := runArgs(t, "controller", "init", "--data", dir); err != nil {
		t.Fatal(err)
	}
	auth, err := natsauth.LoadAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	cluster := []string{testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)}
	var srvs []*transport.Server
	for i := range cluster {
		var routes []string
		for j, c := range cluster {
			if j != i {
				routes = append(routes, "nats://"+c)
			}
		}
		srv, err := transport.StartServer(transport.ServerConfig{Listen: "127.0.0.1:0", Auth: auth, JetStream: true,
			DataDir: filepath.Join(t.TempDir(), "nats"), Name: fmt.Sprintf("n%d", i+1), ClusterListen: cluster[i], Routes: routes,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testutil.StopNATS(t, srv) })
		srvs = append(srvs, srv)
	}
	// An older controller's output stream, with one copy.
	creds, err := auth.Issue(natsauth.Identity{Kind: natsauth.KindController, Name: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	probe, err := transport.Connect(testutil.Context(t, 10*time.Second), transport.NATSConfig{URL: srvs[0].ClientURL(), Creds: creds, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := transport.EnsureStreams(testutil.Context(t, 30*time.Second), probe.NC(), "", transport.StreamLimits{Replicas: 1}); err != nil {
		t.Fatal(err)
	}

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("fm_"+strings.Repeat("b", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c1 := startInproc(t, "controller", "--name", "c1", "--data", dir, "--nats", srvs[0].ClientURL(), "--api-token-file", tokenFile,
		"--http-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0", "--ssh-listen", "off")
	defer func() {
		if err := c1.stop(); err != nil {
			t.Errorf("controller: %v", err)
		}
	}()
	addr := c1.httpAPI(t, 30*time.Second)
	t.Setenv(envAddr, addr)
	t.Setenv(envToken, "fm_"+strings.Repeat("b", 40))

	js, err := jetstream.New(probe.NC())
	if err != nil {
		t.Fatal(err)
	}
	replicas := func(stream string) int {
		s, err := js.Stream(testutil.Context(t, 5*time.Second), stream)
		if err != nil {
			return -1
		}
		info, err := s.Info(testutil.Context(t, 5*time.Second))
		if err != nil {
			return -1
		}
		return info.Config.Replicas
	}
	if _, _, err := runArgs(t, "token", "create", "--name", "before", "--role", "viewer"); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("version: 1\nrules:\n  - name: no-wipes\n    match: {command: 'rm -rf /'}\n    action: deny\n  - name: default\n    action: allow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, e, err := runArgs(t, "policy", "set", policy); err != nil {
		t.Fatalf("policy set: %v\n%s", err, e)
	}
	for _, s := range []string{api.StreamOut, api.StreamEvents, api.StreamAudit, "KV_" + api.BucketTokens, "KV_" + api.BucketPolicy} {
		if r := replicas(s); r != 3 {
			t.Errorf("%s has %d copies, want 3", s, r)
		}
	}

	// One server of three goes: writes still succeed (R3 keeps a quorum).
	testutil.StopNATS(t, srvs[2])
	testutil.Eventually(t, 30*time.Second, func() bool {
		_, _, err := runArgs(t, "token", "create", "--name", "after", "--role", "viewer")
		return err == nil
	}, "token create with one NATS server down")
	testutil.Eventually(t, 30*time.Second, func() bool {
		_, _, err := runArgs(t, "policy", "set", policy)
		return err == nil
	}, "policy set with one NATS server down")
	viewer, _, err := runArgs(t, "token", "create", "--name", "viewer", "--role", "viewer")
	if err != nil {
		t.Fatal(err)
	}
	viewer = strings.TrimSpace(viewer)

	// A second server goes: JetStream has no quorum. Writes are unavailable
	// (503, try again), never internal errors.
	testutil.StopNATS(t, srvs[1])
	_, _, err = runArgs(t, "token", "create", "--name", "lost", "--role", "viewer")
	if err == nil || !strings.Contains(err.Error(), "not reachable now") || strings.Contains(err.Error(), "internal") {
		t.Fatalf("token create without a JetStream quorum: %v\n%s", err, c1.errb.String())
	}
	if _, _, err := runArgs(t, "policy", "set", policy); err == nil || !strings.Contains(err.Error(), "not reachable now") {
		t.Fatalf("policy set without a JetStream quorum: %v\n%s", err, c1.errb.String())
	}

	// A controller started now serves (the bootstrap token works; a stored token
	// is answered unavailable, not refused), and knows every token once JetStream
	// is back.
	data2 := t.TempDir()
	copyKeys(t, filepath.Join(dir, "keys"), filepath.Join(data2, "keys"))
	c2 := startInproc(t, "controller", "--name", "c2", "--data", data2, "--nats", srvs[0].ClientURL(), "--api-token-file", tokenFile,
		"--http-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0", "--ssh-listen", "off")
	defer func() {
		if err := c2.stop(); err != nil {
			t.Errorf("controller c2: %v", err)
		}
	}()
	t.Setenv(envAddr, c2.httpAPI(t, 60*time.Second))
	if _, _, err := runArgs(t, "nodes"); err != nil {
		t.Fatalf("bootstrap token on c2 without JetStream: %v", err)
	}
	t.Setenv(envToken, viewer)
	if _, _, err := runArgs(t, "nodes"); err == nil || !strings.Contains(err.Error(), "not reachable yet") {
		t.Fatalf("a stored token on c2 without JetStream: %v", err)
	}
	testutil.RestartNATS(t, srvs[1])
	testutil.Eventually(t, 60*time.Second, func() bool {
		_, _, err := runArgs(t, "nodes")
		return err == nil
	}, "the stored token on c2 once JetStream is back")
}

// TestControllerNeedsStorage: a controller on a JetStream server with less
// storage than its streams reserve exits at once, saying what to raise (it
// retried in the background and then stopped with "token store: …
// insufficient storage resources available").
func TestControllerNeedsStorage(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := runArgs(t, "controller", "init", "--data", dir); err != nil {
		t.Fatal(err)
	}
	auth, err := natsauth.LoadAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), JetStreamMaxStore: 256 << 20}
	if err := auth.Configure(opts, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start() // stopped below
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb testutil.Buffer
	err = run(ctx, []string{"controller", "--name", "c1", "--data", dir, "--nats", srv.ClientURL(),
		"--http-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0", "--ssh-listen", "off"}, &out, &errb)
	if ctx.Err() != nil || err == nil || !strings.Contains(err.Error(), "max_file_store") {
		t.Fatalf("controller on a server with 256 MiB of JetStream storage: %v (ctx %v)\n%s", err, ctx.Err(), errb.String())
	}
	if strings.Contains(out.String(), "HTTP API") {
		t.Errorf("it served before it failed:\n%s", out.String())
	}
}
