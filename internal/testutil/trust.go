package testutil

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/trust"
)

// Trust is a fleet root key, a controller certificate signed by it, the controller's
// Signer and a Verifier of the root: what tests give controllers (Signer) and nodes
// (Verifier, or NewVerifier for one of their own).
type Trust struct {
	Root     ed25519.PublicKey
	RootKey  ed25519.PrivateKey
	Cert     string // the controller's certificate, name "ctl"
	Key      ed25519.PrivateKey
	Signer   *trust.Signer
	Verifier *trust.Verifier
}

// NewTrust makes a fresh root and a controller "ctl" enrolled under it.
func NewTrust(t testing.TB) *Trust {
	t.Helper()
	tr := &Trust{}
	var err error
	if tr.Root, tr.RootKey, err = trust.GenerateKey(); err != nil {
		t.Fatal(err)
	}
	tr.Signer, tr.Cert, tr.Key = tr.NewSigner(t, "ctl")
	tr.Verifier = tr.NewVerifier(t)
	return tr
}

// NewSigner enrolls another controller under the root: its signer, certificate and key.
func (tr *Trust) NewSigner(t testing.TB, name string) (*trust.Signer, string, ed25519.PrivateKey) {
	t.Helper()
	pub, key, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := trust.IssueCert(tr.RootKey, name, pub, time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	s, err := trust.NewSigner(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return s, cert, key
}

// NewVerifier is a Verifier of the root with a replay cache of its own (one per node).
func (tr *Trust) NewVerifier(t testing.TB) *trust.Verifier {
	t.Helper()
	v, err := trust.NewVerifier(trust.VerifierConfig{Roots: []ed25519.PublicKey{tr.Root}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Header is the header of a request of body to subject signed by the controller for
// actor with role (api.RoleAdmin when empty); its principal is "test:" + actor.
func (tr *Trust) Header(t testing.TB, subject string, body []byte, actor, role string) map[string]string {
	t.Helper()
	if role == "" {
		role = api.RoleAdmin
	}
	h, err := tr.Signer.Sign(subject, body, trust.Claims{Actor: actor, Principal: "test:" + actor, Role: role})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{api.HeaderAuth: h}
}

// WriteFiles writes the root's public key to dir/fleet.pub and the controller's key
// (0600) and certificate to dir/controller.key and dir/controller.cert (the
// trust.*File names), for tests that start fleetmux processes: nodes take
// --trust-root dir/fleet.pub, controllers --signing-key and --signing-cert.
func (tr *Trust) WriteFiles(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := trust.WritePublicKey(filepath.Join(dir, trust.RootPubFile), tr.Root); err != nil {
		t.Fatal(err)
	}
	if err := trust.WritePrivateKey(filepath.Join(dir, trust.ControllerKeyFile), tr.Key); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, trust.ControllerCertFile), []byte(tr.Cert+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
