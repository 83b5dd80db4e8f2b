package controller

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
)

// TestCallReadsServiceErrors: over a real NATS server, a node's error reply (NATS
// micro's error headers, the api error as body) reaches the controller's caller as
// that *api.Error, rule and approval included, and a value reply whose body looks
// like the old {"error":…} envelope stays a value: no reply is told apart by its
// first bytes.
func TestCallReadsServiceErrors(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	connect := func(name string) *transport.Conn {
		c, err := transport.Connect(testutil.Context(t, 5*time.Second), transport.NATSConfig{URL: srv.ClientURL(), Name: name, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		testutil.Eventually(t, 5*time.Second, c.Connected, "%s connected", name)
		return c
	}
	held := &api.Error{Code: api.CodeHeld, Message: "held for approval", Rule: "systemctl", Approval: "n1/a3"}
	subj := api.Subjects{}
	stop, err := connect("node").Serve(api.ServiceName, "0.1.0", map[string]string{
		api.VerbRun:    subj.RPC("n1", api.VerbRun),
		api.VerbScreen: subj.RPC("n1", api.VerbScreen),
	}, func(_ context.Context, verb, _ string, _ map[string]string, _ []byte) ([]byte, *api.Error) {
		if verb == api.VerbRun {
			return nil, held
		}
		return []byte(`{"error":{"code":"busy","message":"not an error"},"rows":3}`), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	c, err := New(Config{Name: "ctl", Bus: connect("ctl"), Signer: testutil.NewTrust(t).Signer, Token: "t0k3n-for-the-test-only-0123456789", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c.Observe(Member{Name: "n1", Addr: "127.0.0.1:1", State: api.NodeAlive, Meta: api.NodeMeta{Name: "n1"}})
	who := principal{actor: "t", id: "test:t", role: api.RoleAdmin}

	var res api.BlockResult
	err = c.call(testutil.Context(t, 10*time.Second), who, "n1", api.VerbRun, api.RunRequest{Session: "s1", Command: "systemctl restart x"}, &res, 5*time.Second)
	var aerr *api.Error
	if !errors.As(err, &aerr) || *aerr != *held {
		t.Fatalf("run = %v, want %+v", err, held)
	}
	var scr api.Screen
	if err := c.call(testutil.Context(t, 10*time.Second), who, "n1", api.VerbScreen, api.SessionRequest{Session: "s1"}, &scr, 5*time.Second); err != nil || scr.Rows != 3 {
		t.Fatalf("screen = %+v, %v: a value reply shaped like an error envelope is a value", scr, err)
	}
}
