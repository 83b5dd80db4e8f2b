package testutil

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"
)

// Logger is quiet unless FLEETMUX_TEST_LOG is set (then it writes debug to stderr).
func Logger() *slog.Logger {
	if os.Getenv("FLEETMUX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Context is a context that ends after d or when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// FreeAddr returns a loopback address nothing listens on (any more).
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
