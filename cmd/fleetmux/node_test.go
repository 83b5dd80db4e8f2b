package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/fleetmux/fleetmux/trust"
)

func TestNodeServesOverNATS(t *testing.T) {
	testutil.NeedTool(t, "bash")
	// A fleet as the README sets it up: controller init, an embedded server with
	// its authority, and the node enrolled.
	dir := t.TempDir()
	if _, _, err := runArgs(t, "controller", "init", "--data", dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runArgs(t, "controller", "init", "--data", dir); err == nil || !strings.Contains(err.Error(), "already initialized") {
		t.Fatalf("a second init: %v", err)
	}
	credsFile := filepath.Join(dir, "cmdnode.creds")
	if _, _, err := runArgs(t, "enroll", "node", "cmdnode", "--data", dir, "--out", credsFile); err != nil {
		t.Fatal(err)
	}
	auth, err := natsauth.LoadAuthority(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := transport.StartServer(transport.ServerConfig{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "nats"), JetStream: true, Auth: auth, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.StopNATS(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	var errb bytes.Buffer
	// Without a trust root the node refuses to start, and says how to get one.
	err = run(ctx, []string{"node", "--name", "cmdnode", "--nats", srv.ClientURL(), "--nats-creds", credsFile, "--data", t.TempDir()}, &bytes.Buffer{}, &errb)
	if err == nil || !strings.Contains(err.Error(), "fleetmux enroll node cmdnode") {
		t.Fatalf("node without a trust root: %v", err)
	}
	// The controller's signing key and certificate, enrolled under the same root.
	if _, _, err := runArgs(t, "enroll", "controller", "ctl", "--data", dir, "--out", filepath.Join(dir, "ctl.creds")); err != nil {
		t.Fatal(err)
	}
	signer, err := trust.LoadSigner(filepath.Join(dir, "ctl.keys", trust.ControllerKeyFile), filepath.Join(dir, "ctl.keys", trust.ControllerCertFile))
	if err != nil {
		t.Fatal(err)
	}
	sign := func(verb string, body []byte) map[string]string {
		h, err := signer.Sign(api.Subjects{}.RPC("cmdnode", verb), body, trust.Claims{Actor: "tester", Principal: "test:tester", Role: api.RoleOperator})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{api.HeaderAuth: h}
	}
	done := make(chan error, 1)
	nodeData := t.TempDir()
	endHolder(t, nodeData)
	go func() {
		done <- run(ctx, []string{"node", "--name", "cmdnode", "--nats", srv.ClientURL(), "--nats-creds", credsFile, "--data", nodeData, "--label", "role=test",
			"--trust-root", filepath.Join(dir, "cmdnode.keys", trust.RootPubFile)}, &bytes.Buffer{}, &errb)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node exited with %v\n%s", err, errb.String())
		}
	}()
	ctl, err := auth.Issue(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := transport.Connect(context.Background(), transport.NATSConfig{URL: srv.ClientURL(), Creds: ctl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	subj := api.Subjects{}
	var reply []byte
	testutil.Eventually(t, 20*time.Second, func() bool {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		defer rcancel()
		body := []byte(`{"title":"t"}`)
		reply, err = c.Request(rctx, subj.RPC("cmdnode", "create"), sign("create", body), body)
		return err == nil
	}, "the node to answer")
	var s api.Session
	if err := json.Unmarshal(reply, &s); err != nil || s.ID != "s1" || s.Node != "cmdnode" {
		t.Fatalf("create reply %s (%v)", reply, err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	body := []byte(`{"session":"s1","command":"echo via-nats; (exit 6)","timeout_ms":10000}`)
	reply, err = c.Request(rctx, subj.RPC("cmdnode", "run"), sign("run", body), body)
	var r api.BlockResult
	if err != nil || json.Unmarshal(reply, &r) != nil || r.Text != "via-nats" || r.Block.ExitCode == nil || *r.Block.ExitCode != 6 {
		t.Fatalf("run reply %s (%v)", reply, err)
	}
	// Another node's and a subscriber's credentials cannot make the node run
	// anything: the server refuses the publish, and no block and no file appear.
	marker := filepath.Join(t.TempDir(), "pwned")
	for _, id := range []natsauth.Identity{{Kind: natsauth.KindNode, Name: "other"}, {Kind: natsauth.KindSubscriber, Name: "dash"}} {
		cr, err := auth.Issue(id)
		if err != nil {
			t.Fatal(err)
		}
		var lb testutil.Buffer
		bad, err := transport.Connect(context.Background(), transport.NATSConfig{URL: srv.ClientURL(), Creds: cr, Logger: slog.New(slog.NewTextHandler(&lb, nil))})
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 5*time.Second, bad.Connected, "%s connected", id.UserName())
		if err := bad.Publish(subj.RPC("cmdnode", "run"), nil, []byte(`{"session":"s1","command":"touch `+marker+`"}`)); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 5*time.Second, func() bool { return strings.Contains(lb.String(), "Permissions Violation") }, "%s: a permissions violation", id.UserName())
		bad.Close()
	}
	rctx2, rcancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel2()
	body = []byte(`{"session":"s1"}`)
	reply, err = c.Request(rctx2, subj.RPC("cmdnode", "get"), sign("get", body), body)
	if err != nil || json.Unmarshal(reply, &s) != nil || s.Blocks != 1 {
		t.Fatalf("after the refused requests: %s (%v), want 1 block", reply, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the refused command ran")
	}
	if err := run(context.Background(), []string{"node", "--name", "bad.name"}, &bytes.Buffer{}, &bytes.Buffer{}); exitCode(err) != 2 {
		t.Fatalf("bad name: %v (exit %d)", err, exitCode(err))
	}
	// Without credentials a node does not even try.
	if err := run(context.Background(), []string{"node", "--name", "x", "--nats", srv.ClientURL(), "--data", t.TempDir()}, &bytes.Buffer{}, &bytes.Buffer{}); exitCode(err) != 2 {
		t.Fatalf("--nats without creds: %v (exit %d)", err, exitCode(err))
	}
}
