package transport_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

// bus and gossip mirror node.Bus and node.Gossip: *Conn and *Gossip must satisfy
// them without transport importing node.
type bus interface {
	Publish(subject string, header map[string]string, data []byte) error
	Serve(name, version string, subjects map[string]string, handle func(ctx context.Context, verb, subject string, header map[string]string, data []byte) []byte) (stop func() error, err error)
	Connected() bool
}

type gossip interface {
	UpdateMeta(meta api.NodeMeta) error
}

var (
	_ bus    = (*transport.Conn)(nil)
	_ gossip = (*transport.Gossip)(nil)
)

// logger is quiet unless FLEETMUX_TEST_LOG is set.
func logger() *slog.Logger {
	if os.Getenv("FLEETMUX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// connect connects to url and closes the connection when the test ends.
func connect(t *testing.T, url string) *transport.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := transport.Connect(ctx, transport.NATSConfig{URL: url, Logger: logger(), DrainTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// connected connects and waits until the connection is up.
func connected(t *testing.T, url string) *transport.Conn {
	t.Helper()
	c := connect(t, url)
	testutil.Eventually(t, 5*time.Second, c.Connected, "connected to %s", url)
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
