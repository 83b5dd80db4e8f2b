package transport_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
)

func TestServerRefusesNonLoopbackWithoutAuth(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:4222"} {
		_, err := transport.StartServer(transport.ServerConfig{Listen: listen, Logger: testutil.Logger()})
		if !errors.Is(err, transport.ErrInsecure) {
			t.Errorf("listen %s without auth: %v", listen, err)
		}
	}
	_, err := transport.StartServer(transport.ServerConfig{Listen: "127.0.0.1:0", ClusterListen: "0.0.0.0:0", Logger: testutil.Logger()})
	if !errors.Is(err, transport.ErrInsecure) {
		t.Errorf("cluster listen beyond loopback without auth: %v", err)
	}
}

func TestServerConfigErrors(t *testing.T) {
	for name, cfg := range map[string]transport.ServerConfig{
		"jetstream without dir":  {Listen: "127.0.0.1:0", JetStream: true},
		"credentials in a route": {Listen: "127.0.0.1:0", ClusterListen: "127.0.0.1:0", Routes: []string{"nats://u:p@127.0.0.1:6222"}},
		"bad listen":             {Listen: "localhost"},
		"routes without cluster": {Listen: "127.0.0.1:0", Routes: []string{"nats://127.0.0.1:6222"}},
		"clustered js no name": {Listen: "127.0.0.1:0", JetStream: true, DataDir: t.TempDir(),
			ClusterListen: "127.0.0.1:0", Routes: []string{"nats://127.0.0.1:6222"}},
	} {
		cfg.Logger = testutil.Logger()
		if _, err := transport.StartServer(cfg); !errors.Is(err, transport.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestServerPortInUseFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	_, err = transport.StartServer(transport.ServerConfig{Listen: l.Addr().String(), Logger: testutil.Logger()})
	if !errors.Is(err, transport.ErrNotReady) {
		t.Fatalf("port in use: %v", err)
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("error does not say why: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to fail", d)
	}
}

func TestServerRestartSamePortAndDataDir(t *testing.T) {
	dir := t.TempDir()
	srv := testutil.StartNATS(t, dir)
	addr := srv.Addr()
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("addr %s", addr)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	srv2 := testutil.RestartNATS(t, srv)
	if srv2.Addr() != addr || srv2.Config().DataDir != dir {
		t.Fatalf("restarted on %s (%s), want %s (%s)", srv2.Addr(), srv2.Config().DataDir, addr, dir)
	}
	connected(t, srv2.ClientURL())
}
