package testutil

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/transport"
)

// quietLogger drops everything; the embedded server's log is noise in tests.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// StartNATS starts an embedded nats-server with JetStream on a random loopback port,
// storing under dir (use t.TempDir()), and shuts it down when the test ends.
// Connect to srv.ClientURL().
func StartNATS(t testing.TB, dir string) *transport.Server {
	t.Helper()
	return startNATS(t, transport.ServerConfig{
		Listen:    "127.0.0.1:0",
		DataDir:   dir,
		JetStream: true,
		Logger:    quietLogger(),
	})
}

// RestartNATS shuts old down and starts a new server on the same port and data dir,
// as after a NATS outage: clients of old reconnect to it, JetStream data survives.
func RestartNATS(t testing.TB, old *transport.Server) *transport.Server {
	t.Helper()
	StopNATS(t, old)
	return startNATS(t, old.Config())
}

// StopNATS shuts srv down and waits until it has (idempotent; at most 10s).
func StopNATS(t testing.TB, srv *transport.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("stop nats: %v", err)
	}
}

func startNATS(t testing.TB, cfg transport.ServerConfig) *transport.Server {
	t.Helper()
	srv, err := transport.StartServer(cfg)
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("stop nats: %v", err)
		}
	})
	return srv
}

// StartNATSAgain starts a new server with the configuration (port, data dir) of a
// stopped one, ending an outage begun with StopNATS.
func StartNATSAgain(t testing.TB, stopped *transport.Server) *transport.Server {
	t.Helper()
	return startNATS(t, stopped.Config())
}
