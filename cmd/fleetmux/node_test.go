package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
)

func TestNodeServesOverNATS(t *testing.T) {
	testutil.NeedTool(t, "bash")
	srv := testutil.StartNATS(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	var errb bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"node", "--name", "cmdnode", "--nats", srv.ClientURL(), "--data", t.TempDir(), "--label", "role=test"}, &bytes.Buffer{}, &errb)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node exited with %v\n%s", err, errb.String())
		}
	}()
	c, err := transport.Connect(context.Background(), transport.NATSConfig{URL: srv.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	subj := api.Subjects{}
	var reply []byte
	testutil.Eventually(t, 20*time.Second, func() bool {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		defer rcancel()
		reply, err = c.Request(rctx, subj.RPC("cmdnode", "create"), nil, []byte(`{"title":"t"}`))
		return err == nil
	}, "the node to answer")
	var s api.Session
	if err := json.Unmarshal(reply, &s); err != nil || s.ID != "s1" || s.Node != "cmdnode" {
		t.Fatalf("create reply %s (%v)", reply, err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	reply, err = c.Request(rctx, subj.RPC("cmdnode", "run"), nil, []byte(`{"session":"s1","command":"echo via-nats; (exit 6)","timeout_ms":10000}`))
	var r api.BlockResult
	if err != nil || json.Unmarshal(reply, &r) != nil || r.Text != "via-nats" || r.Block.ExitCode == nil || *r.Block.ExitCode != 6 {
		t.Fatalf("run reply %s (%v)", reply, err)
	}
	if err := run(context.Background(), []string{"node", "--name", "bad.name"}, &bytes.Buffer{}, &bytes.Buffer{}); exitCode(err) != 2 {
		t.Fatalf("bad name: %v (exit %d)", err, exitCode(err))
	}
}
