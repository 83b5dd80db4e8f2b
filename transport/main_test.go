package transport_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

// bus mirrors node.Bus: *Conn must satisfy it without transport importing node.
type bus interface {
	Publish(subject string, header map[string]string, data []byte) error
	Serve(name, version string, subjects map[string]string, handle func(ctx context.Context, verb, subject string, header map[string]string, data []byte) ([]byte, *api.Error)) (stop func() error, err error)
	Connected() bool
}

var _ bus = (*transport.Conn)(nil)

// connect connects to url and closes the connection when the test ends.
func connect(t *testing.T, url string) *transport.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := transport.Connect(ctx, transport.NATSConfig{URL: url, Logger: testutil.Logger(), DrainTimeout: 2 * time.Second})
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
