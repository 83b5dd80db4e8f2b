package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
)

// stack is a real controller and node on an embedded NATS server.
type stack struct {
	t     *testing.T
	conn  *transport.Conn
	ctl   func() error // stops the controller and its HTTP API
	addr  string
	trust *testutil.Trust
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newStack(t *testing.T) (*stack, *client.Client) {
	t.Helper()
	testutil.NeedTool(t, "bash")
	t.Setenv("HOME", t.TempDir())
	srv := testutil.StartNATS(t, t.TempDir())
	ctx := context.Background()
	nconn, err := transport.Connect(ctx, transport.NATSConfig{URL: srv.ClientURL(), Name: "n1", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nconn.Close() })
	tr := testutil.NewTrust(t)
	n, err := node.New(node.Config{Name: "n1", DataDir: t.TempDir(), Bus: nconn, Verifier: tr.Verifier, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s := &stack{t: t, trust: tr}
	s.conn, err = transport.Connect(ctx, transport.NATSConfig{URL: srv.ClientURL(), Name: "ctl", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	s.startController("127.0.0.1:0")
	c, err := client.New(client.Config{Addr: "http://" + s.addr, Token: e2eToken, Actor: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// e2eToken is the controller's bootstrap admin token.
const e2eToken = "e2e-token"

// startController starts a controller on listen (the node table fed directly:
// gossip is tested elsewhere).
func (s *stack) startController(listen string) {
	s.t.Helper()
	ctl, err := controller.New(controller.Config{Bus: s.conn, Signer: s.trust.Signer, Token: e2eToken, Logger: quiet()})
	if err != nil {
		s.t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Listen: listen, Fleet: ctl, Logger: quiet()})
	if err != nil {
		s.t.Fatal(err)
	}
	ctl.Observe(controller.Member{Name: "n1", Addr: "127.0.0.1:1", State: api.NodeAlive, Meta: api.NodeMeta{Name: "n1"}})
	if err := ctl.Start(); err != nil {
		s.t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		s.t.Fatal(err)
	}
	stop := func() error {
		err := h.Close()
		ctl.Close()
		return err
	}
	s.ctl, s.addr = stop, h.Addr()
	s.t.Cleanup(func() { stop() })
}

func TestE2ETypedErrors(t *testing.T) {
	_, c := newStack(t)
	ctx := context.Background()
	_, err := c.Session(ctx, "n1", "s99")
	var ce *client.Error
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &ce) || ce.Status != 404 {
		t.Fatalf("unknown session: %v", err)
	}
	if _, err := c.Session(ctx, "nowhere", "s1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown node: %v", err)
	}
	s, err := c.NewSession(ctx, api.NewSession{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, "n1", s.ID, api.RunBody{Command: ""}); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("empty command: %v", err)
	}
	br, err := c.Run(ctx, "n1", s.ID, api.RunBody{Command: "echo ok; (exit 5)", TimeoutMS: 10000})
	if err != nil || br.Text != "ok" || br.Block.ExitCode == nil || *br.Block.ExitCode != 5 {
		t.Fatalf("run: %+v %v", br, err)
	}
	// A command running when another is sent: busy.
	if _, err := c.Run(ctx, "n1", s.ID, api.RunBody{Command: "sleep 5", TimeoutMS: 50}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, "n1", s.ID, api.RunBody{Command: "true"}); !errors.Is(err, client.ErrBusy) {
		t.Fatalf("run while busy: %v", err)
	}
}

// TestE2EFollowAcrossControllerRestart: Follow (what `fleetmux logs -f` uses) goes
// on through a controller restart without losing or repeating a byte.
func TestE2EFollowAcrossControllerRestart(t *testing.T) {
	s, c := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := c.NewSession(ctx, api.NewSession{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "n1", sess.ID, client.WaitQuery{Until: api.UntilIdle, TimeoutMS: 10000}); err != nil {
		t.Fatal(err)
	}
	// A long command prints numbered lines while the controller restarts.
	if _, err := c.Run(ctx, "n1", sess.ID, api.RunBody{Command: "for i in $(seq 1 300); do echo line-$i; sleep 0.005; done", TimeoutMS: 50}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got bytes.Buffer
	done := make(chan error, 1)
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	go func() {
		_, err := c.FollowChunks(fctx, "n1", sess.ID, 0, func(off int64, p []byte) error {
			mu.Lock()
			defer mu.Unlock()
			if off != int64(got.Len()) {
				t.Errorf("chunk at %d, have %d bytes", off, got.Len())
			}
			got.Write(p)
			return nil
		})
		done <- err
	}()
	have := func(s string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return strings.Contains(got.String(), s) }
	}
	testutil.Eventually(t, 20*time.Second, have("line-20\r\n"), "output before the restart")
	addr := s.addr
	if err := s.ctl(); err != nil {
		t.Fatal(err)
	}
	s.startController(addr) // the same address: the client reconnects
	testutil.Eventually(t, 30*time.Second, have("line-300\r\n"), "output after the restart")
	if _, err := c.Wait(ctx, "n1", sess.ID, client.WaitQuery{Until: api.UntilIdle, TimeoutMS: 10000}); err != nil {
		t.Fatal(err)
	}
	ch, err := c.Output(ctx, "n1", sess.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return got.Len() >= len(ch.Data) }, "the follower to catch up")
	fcancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Equal(got.Bytes()[:len(ch.Data)], ch.Data) {
		t.Fatalf("followed output differs from the session's")
	}
	for i := 1; i <= 300; i++ {
		if !strings.Contains(got.String(), "line-"+strconv.Itoa(i)+"\r\n") {
			t.Fatalf("line-%d missing", i)
		}
	}
}

// TestE2EAttach: the SDK's attach against the real controller.
func TestE2EAttach(t *testing.T) {
	_, c := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess, err := c.NewSession(ctx, api.NewSession{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "n1", sess.ID, client.WaitQuery{Until: api.UntilIdle, TimeoutMS: 10000}); err != nil {
		t.Fatal(err)
	}
	a, err := c.Attach(ctx, "n1", sess.ID, client.AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Resize(77, 22); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("echo via-$((40+2)); exit 9\r")); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(a)
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, out)
	}
	if !strings.Contains(string(out), "via-42") || a.ExitCode() == nil || *a.ExitCode() != 9 {
		t.Fatalf("attach: %q, exit %v", out, a.ExitCode())
	}
	if _, err := c.Attach(ctx, "n1", "s99", client.AttachOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("attach to an unknown session: %v", err)
	}
}
