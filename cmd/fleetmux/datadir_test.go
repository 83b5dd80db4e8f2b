package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/trust"
	"golang.org/x/crypto/ssh"
)

// devRefuses runs fleetmux dev on data (free loopback ports) and returns the
// error it stopped with; it fails the test when dev came up instead (it then
// runs until the deadline, so a test of old code fails rather than hangs).
func devRefuses(t *testing.T, data string, extra ...string) error {
	t.Helper()
	needBash(t)
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errb testutil.Buffer
	err := run(ctx, append([]string{"dev", "--data", data, "--name", "here",
		"--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0"}, extra...), &out, &errb)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("dev did not refuse (err %v); stdout:\n%s", err, out.String())
	}
	return err
}

// TestDevRefusesUnsafeDataDir is issue 15 #11: a data dir others can write, or
// that is someone else's, is refused with a message that says how to fix it,
// and nothing is written into it.
func TestDevRefusesUnsafeDataDir(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	err := devRefuses(t, open, "--ssh-listen", "off")
	if !strings.Contains(err.Error(), "can be written by others (mode 0777)") || !strings.Contains(err.Error(), "chmod go-w "+open) {
		t.Errorf("0777 data dir: %v", err)
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Errorf("dev wrote into the refused dir: %v", ents)
	}
	if st, _ := os.Stat(open); st.Mode().Perm() != 0o777 {
		t.Errorf("dev changed the refused dir's mode: %v", st.Mode())
	}
	if os.Geteuid() != 0 {
		return
	}
	theirs := filepath.Join(t.TempDir(), "theirs")
	os.Mkdir(theirs, 0o700)
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := devRefuses(t, theirs, "--ssh-listen", "off"); !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("someone else's data dir: %v", err)
	}
}

// TestDevFollowsNoPlantedLink is the other half of #11: a link planted where dev
// writes (http.url made fleetmux overwrite the file it pointed to) is refused,
// and the file it points to is untouched.
func TestDevFollowsNoPlantedLink(t *testing.T) {
	for _, name := range []string{"http.url", "nats.url", "audit.jsonl"} {
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			os.Mkdir(data, 0o700)
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(victim, filepath.Join(data, name)); err != nil {
				t.Fatal(err)
			}
			err := devRefuses(t, data, "--ssh-listen", "off")
			if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("planted %s: %v", name, err)
			}
			if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
				t.Errorf("the link's target was written: %q", b)
			}
		})
	}
}

// TestDevRefusesExposedHostKey: an SSH host key others may read (or someone
// else's) is refused, as OpenSSH refuses an unprotected private key.
func TestDevRefusesExposedHostKey(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	os.Mkdir(data, 0o700)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(data, "ssh_host_ed25519_key")
	if err := os.WriteFile(key, pem.EncodeToMemory(block), 0o644); err != nil {
		t.Fatal(err)
	}
	ak := filepath.Join(t.TempDir(), "authorized_keys")
	os.WriteFile(ak, nil, 0o600)
	err = devRefuses(t, data, "--ssh-listen", "127.0.0.1:0", "--authorized-keys", ak)
	if !strings.Contains(err.Error(), "ssh_host_ed25519_key") || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("0644 host key: %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	os.Chmod(key, 0o600)
	os.Chown(key, 65534, 65534)
	if err := devRefuses(t, data, "--ssh-listen", "127.0.0.1:0", "--authorized-keys", ak); !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("someone else's host key: %v", err)
	}
}

// TestDevAdoptsNoPlantedToken: a link planted at DATA/token, pointing at a token its
// planter knows, must not become dev's admin token (read through the link, it would
// hand the planter the API).
func TestDevAdoptsNoPlantedToken(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	os.Mkdir(data, 0o700)
	known, _, err := trust.NewToken("dev", api.RoleAdmin, 0, "planted", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(t.TempDir(), "planted")
	if err := os.WriteFile(planted, []byte(known+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(planted, filepath.Join(data, "token")); err != nil {
		t.Fatal(err)
	}
	got, err := devToken(data)
	if err == nil || got == known {
		t.Fatalf("devToken through a planted link = %q, %v; want a refusal", got, err)
	}
	if !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("refusal %q does not say why", err)
	}
}
