package trust

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	pub, key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	kp, pp := filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub")
	if err := WritePrivateKey(kp, key); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(kp); st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode %#o", st.Mode().Perm())
	}
	if err := WritePrivateKey(kp, key); !errors.Is(err, os.ErrExist) {
		t.Fatalf("overwrite: %v", err)
	}
	got, err := ReadPrivateKey(kp)
	if err != nil || !got.Equal(key) {
		t.Fatalf("ReadPrivateKey = %v", err)
	}
	if err := WritePublicKey(pp, pub); err != nil {
		t.Fatal(err)
	}
	gotPub, err := ReadPublicKey(pp)
	if err != nil || !gotPub.Equal(pub) {
		t.Fatalf("ReadPublicKey = %v", err)
	}
	// Readable by others: refused.
	if err := os.Chmod(kp, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPrivateKey(kp); !errors.Is(err, ErrKeyFile) {
		t.Fatalf("group-readable key: %v", err)
	}
	// A link is neither followed when written nor when read.
	link := filepath.Join(dir, "link.key")
	target := filepath.Join(dir, "target")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WritePrivateKey(link, key); err == nil {
		t.Fatal("wrote through a symbolic link")
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the link's target was created")
	}
	// A public key file is not a private key, and the other way round.
	if _, err := ReadPrivateKey(pp); err == nil {
		t.Fatal("public key read as private (its mode is 0644 or it holds no private block)")
	}
	if err := os.Chmod(kp, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPublicKey(kp); !errors.Is(err, ErrKeyFile) {
		t.Fatalf("private key read as public: %v", err)
	}
}

func TestParsePublicKeys(t *testing.T) {
	a, _, _ := GenerateKey()
	b, _, _ := GenerateKey()
	both := append(append([]byte("comment\n"), EncodePublicKey(a)...), EncodePublicKey(b)...)
	keys, err := ParsePublicKeys(both)
	if err != nil || len(keys) != 2 || !keys[0].Equal(a) || !keys[1].Equal(b) {
		t.Fatalf("ParsePublicKeys = %d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", "nothing", "-----BEGIN FLEETMUX ED25519 PUBLIC KEY-----\nAAAA\n-----END FLEETMUX ED25519 PUBLIC KEY-----\n"} {
		if _, err := ParsePublicKey([]byte(bad)); !errors.Is(err, ErrKeyFile) {
			t.Errorf("ParsePublicKey(%q) = %v", bad, err)
		}
	}
}

func TestInitRootAndEnroll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	pub, err := InitRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := InitRoot(dir) // idempotent: the same root
	if err != nil || !again.Equal(pub) {
		t.Fatalf("InitRoot again: %v", err)
	}
	if st, _ := os.Stat(filepath.Join(dir, RootKeyFile)); st.Mode().Perm() != 0o600 {
		t.Fatalf("root key mode %#o", st.Mode().Perm())
	}
	if !ControllerNeedsCert(dir, "ctl", time.Hour) {
		t.Fatal("no certificate yet, but none needed")
	}
	if err := EnrollController(dir, dir, "ctl", 0); err != nil {
		t.Fatal(err)
	}
	if ControllerNeedsCert(dir, "ctl", time.Hour) || !ControllerNeedsCert(dir, "other", time.Hour) {
		t.Fatal("ControllerNeedsCert disagrees with the certificate")
	}
	s, err := LoadSigner(filepath.Join(dir, ControllerKeyFile), filepath.Join(dir, ControllerCertFile))
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(filepath.Join(dir, RootPubFile), VerifierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := s.Sign(subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleAdmin})
	if p, err := v.Verify(subj, body, h); err != nil || p.Controller != "ctl" {
		t.Fatalf("Verify = %+v, %v", p, err)
	}
	// Enrolling again keeps the key and renews the certificate.
	key1, _ := ReadPrivateKey(filepath.Join(dir, ControllerKeyFile))
	if err := EnrollController(dir, dir, "ctl", time.Hour); err != nil {
		t.Fatal(err)
	}
	key2, _ := ReadPrivateKey(filepath.Join(dir, ControllerKeyFile))
	if !key1.Equal(key2) {
		t.Fatal("enrolling again replaced the controller's key")
	}
	// Another root does not verify this controller.
	other := filepath.Join(t.TempDir(), "other")
	if _, err := InitRoot(other); err != nil {
		t.Fatal(err)
	}
	v2, _ := LoadVerifier(filepath.Join(other, RootPubFile), VerifierConfig{})
	h, _ = s.Sign(subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleAdmin})
	if _, err := v2.Verify(subj, body, h); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("foreign root: %v", err)
	}
	// A pub without its key is not silently replaced.
	lone := t.TempDir()
	if err := WritePublicKey(filepath.Join(lone, RootPubFile), ed25519.PublicKey(pub)); err != nil {
		t.Fatal(err)
	}
	if _, err := InitRoot(lone); err == nil || !strings.Contains(err.Error(), "without") {
		t.Fatalf("InitRoot over a lone public key: %v", err)
	}
	if err := EnrollController(t.TempDir(), t.TempDir(), "ctl", 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("enroll without a root: %v", err)
	}
}

func TestIssueCertChecks(t *testing.T) {
	pub, key, _ := GenerateKey()
	if _, err := IssueCert(key, "a.b", pub, time.Now().Add(time.Hour)); err == nil {
		t.Fatal("bad name accepted")
	}
	if _, err := IssueCert(key, "ok", pub, time.Now().Add(-time.Hour)); err == nil {
		t.Fatal("expired certificate issued")
	}
	c, err := IssueCert(key, "ok", pub, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := ParseCert(c)
	if err != nil || pc.Name != "ok" || !pc.Key.Equal(pub) {
		t.Fatalf("ParseCert = %+v, %v", pc, err)
	}
}
