package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/fleetmux/fleetmux/trust"
)

// TestInitAndEnroll: controller init makes the fleet's keys (0600) once; enroll
// writes each identity's .creds (0600, with the CA) and its keys bundle.
func TestInitAndEnroll(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "ctl")
	if _, _, err := runArgs(t, "enroll", "node", "n1", "--data", data, "--out", filepath.Join(dir, "x.creds")); err == nil {
		t.Fatal("enroll before init succeeded")
	}
	out, _, err := runArgs(t, "controller", "init", "--data", data)
	if err != nil || !strings.Contains(out, "fleet root") {
		t.Fatalf("init: %q %v", out, err)
	}
	keys := filepath.Join(data, "keys")
	for _, f := range []string{"nats-operator.nk", "nats-account.nk", "nats-system.nk", "nats-ca.key", trust.RootKeyFile} {
		if st, err := os.Stat(filepath.Join(keys, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, err, st)
		}
	}
	before, _ := os.ReadFile(filepath.Join(keys, "nats-account.nk"))
	if _, _, err := runArgs(t, "controller", "init", "--data", data); err == nil {
		t.Fatal("a second init succeeded")
	}
	if after, _ := os.ReadFile(filepath.Join(keys, "nats-account.nk")); string(after) != string(before) {
		t.Fatal("a refused init changed the account key")
	}

	nodeCreds := filepath.Join(dir, "n1.creds")
	if _, _, err := runArgs(t, "enroll", "node", "n1", "--data", data, "--out", nodeCreds); err != nil {
		t.Fatal(err)
	}
	c, err := natsauth.ReadCreds(nodeCreds)
	if err != nil || len(c.CA) == 0 {
		t.Fatalf("node creds: %v (CA %d bytes)", err, len(c.CA))
	}
	if st, _ := os.Stat(nodeCreds); st.Mode().Perm() != 0o600 {
		t.Errorf("creds mode %v", st.Mode())
	}
	pub, _ := os.ReadFile(filepath.Join(keys, trust.RootPubFile))
	if got, err := os.ReadFile(filepath.Join(dir, "n1.keys", trust.RootPubFile)); err != nil || string(got) != string(pub) {
		t.Fatalf("the node's fleet.pub: %v", err)
	}

	ctlCreds := filepath.Join(dir, "c2.creds")
	out, _, err = runArgs(t, "enroll", "controller", "c2", "--data", data, "--out", ctlCreds, "--print-jwt")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"operator: ", "resolver: MEMORY", "resolver_preload", "fleetmux.rpc.>", "_INBOX.controller.c2"} {
		if !strings.Contains(out, want) {
			t.Errorf("--print-jwt output lacks %q", want)
		}
	}
	if _, err := trust.LoadSigner(filepath.Join(dir, "c2.keys", trust.ControllerKeyFile), filepath.Join(dir, "c2.keys", trust.ControllerCertFile)); err != nil {
		t.Fatalf("the controller's signing key: %v", err)
	}

	subCreds := filepath.Join(dir, "s.creds")
	if _, _, err := runArgs(t, "enroll", "subscriber", "dash", "--nodes", "n1,n2", "--data", data, "--out", subCreds); err != nil {
		t.Fatal(err)
	}
	sc, _ := natsauth.ReadCreds(subCreds)
	uc, err := sc.Claims()
	if err != nil || !uc.Permissions.Sub.Allow.Contains("fleetmux.out.n2.>") || uc.Permissions.Sub.Allow.Contains("fleetmux.out.>") {
		t.Fatalf("narrowed subscriber: %v %v", uc.Permissions.Sub.Allow, err)
	}
	for _, bad := range [][]string{{"enroll", "admin", "x"}, {"enroll", "node", "bad.name"}, {"enroll", "node", "n", "--nodes", "a"}} {
		if _, _, err := runArgs(t, append(bad, "--data", data, "--out", filepath.Join(dir, "bad.creds"))...); exitCode(err) != 2 {
			t.Errorf("%v: exit %d (%v)", bad, exitCode(err), err)
		}
	}
}
