package testutil

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
)

// AuthFleet is an embedded server in operator mode with TLS, the way every fleetmux
// command runs it, and the authority that issues its users.
type AuthFleet struct {
	t   testing.TB
	A   *natsauth.Authority
	Srv *transport.Server
	Dir string
}

// StartAuthFleet starts an embedded server with JetStream under a new authority; it
// shuts down when the test ends.
func StartAuthFleet(t testing.TB) *AuthFleet {
	t.Helper()
	dir := t.TempDir()
	a, err := natsauth.InitAuthority(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := transport.StartServer(transport.ServerConfig{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "nats"), JetStream: true, Auth: a, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { StopNATS(t, srv) })
	return &AuthFleet{t: t, A: a, Srv: srv, Dir: dir}
}

// Creds issues id's credentials into a .creds file and returns its path.
func (f *AuthFleet) Creds(id natsauth.Identity) string {
	f.t.Helper()
	c, err := f.A.Issue(id)
	if err != nil {
		f.t.Fatal(err)
	}
	p := filepath.Join(f.Dir, id.Kind+"-"+id.Name+".creds")
	if err := natsauth.WriteCreds(p, c); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// NATSClient is a plain nats.go client, as a third party would write it: the .creds
// file gives both the user and (RootCAs) the CA. Async errors (permission
// violations) go to Errs.
type NATSClient struct {
	NC   *nats.Conn
	Errs chan error
}

// Client connects a plain nats.go client with a .creds file (AuthFleet.Creds); it
// closes when the test ends.
func (f *AuthFleet) Client(credsFile string, extra ...nats.Option) *NATSClient {
	f.t.Helper()
	cl := &NATSClient{Errs: make(chan error, 64)}
	opts := append([]nats.Option{nats.UserCredentials(credsFile), nats.RootCAs(credsFile), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case cl.Errs <- err:
			default:
			}
		})}, extra...)
	nc, err := nats.Connect(f.Srv.ClientURL(), opts...)
	if err != nil {
		f.t.Fatalf("connect with %s: %v", filepath.Base(credsFile), err)
	}
	f.t.Cleanup(nc.Close)
	cl.NC = nc
	return cl
}

// Violation waits for the permissions violation naming subject.
func (cl *NATSClient) Violation(t testing.TB, subject string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-cl.Errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
			t.Logf("other async error: %v", err)
		case <-deadline:
			t.Fatalf("no permissions violation for %s", subject)
		}
	}
}

// NoErrors asserts that no async error came (after a round trip to the server).
func (cl *NATSClient) NoErrors(t testing.TB) {
	t.Helper()
	if err := cl.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cl.Errs:
		t.Fatalf("async error: %v", err)
	default:
	}
}

// Conn connects a transport.Conn with id's credentials, as the fleetmux commands
// do, and waits until it is up; its log goes to the returned buffer.
func (f *AuthFleet) Conn(id natsauth.Identity) (*transport.Conn, *Buffer) {
	f.t.Helper()
	c, err := f.A.Issue(id)
	if err != nil {
		f.t.Fatal(err)
	}
	var lb Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := transport.Connect(ctx, transport.NATSConfig{URL: f.Srv.ClientURL(), Creds: c,
		Logger: slog.New(slog.NewTextHandler(&lb, nil)), DrainTimeout: 2 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	Eventually(f.t, 5*time.Second, conn.Connected, "%s connected", id.UserName())
	return conn, &lb
}
