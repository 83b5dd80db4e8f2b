package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// copyKeys copies the files of a keys directory (or an enrollment's bundle) into
// another, modes kept.
func copyKeys(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// TestControllerNATSRoutes: two controllers cluster their embedded NATS servers
// (--nats-routes, mutual TLS, the authority copied from init) and a node that
// connects to one is reached through the HTTP API of the other.
func TestControllerNATSRoutes(t *testing.T) {
	needBash(t)
	dir := t.TempDir()
	dataA, dataB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	const token = "routes-test-token" // both controllers' bootstrap admin token
	t.Setenv(envToken, token)
	if _, _, err := runArgs(t, "controller", "init", "--data", dataA); err != nil {
		t.Fatal(err)
	}
	// The second controller runs with a copy of the authority.
	copyKeys(t, filepath.Join(dataA, "keys"), filepath.Join(dataB, "keys"))
	// Each process gets what enroll wrote for it: the node its .creds and fleet.pub,
	// each controller its signing key and certificate.
	nodeCreds := filepath.Join(dir, "n.creds")
	if _, _, err := runArgs(t, "enroll", "node", "rn", "--data", dataA, "--out", nodeCreds); err != nil {
		t.Fatal(err)
	}
	copyKeys(t, filepath.Join(dir, "n.keys"), filepath.Join(dir, "node", "keys"))
	for name, data := range map[string]string{"ctl-a": dataA, "ctl-b": dataB} {
		out := filepath.Join(dir, name+".creds")
		if _, _, err := runArgs(t, "enroll", "controller", name, "--data", dataA, "--out", out); err != nil {
			t.Fatal(err)
		}
		copyKeys(t, filepath.Join(dir, name+".keys"), filepath.Join(data, "keys"))
	}
	ad := freeAddrs(t, 6) // nats A, B; cluster A, B; gossip A, B
	ctl := func(name, data, nats, cluster, route, gossip string) *inproc {
		return startInproc(t, "controller", "--name", name, "--data", data, "--nats-listen", nats, "--nats-cluster-listen", cluster,
			"--nats-routes", "nats://"+route, "--http-listen", "127.0.0.1:0", "--gossip-listen", gossip, "--ssh-listen", "off")
	}
	a := ctl("ctl-a", dataA, ad[0], ad[2], ad[3], ad[4])
	b := ctl("ctl-b", dataB, ad[1], ad[3], ad[2], ad[5])
	endHolder(t, filepath.Join(dir, "node"))
	startInproc(t, "node", "--name", "rn", "--data", filepath.Join(dir, "node"), "--nats", "nats://"+ad[1], "--nats-creds", nodeCreds,
		"--trust-root", filepath.Join(dir, "n.keys", "fleet.pub"), // written by enroll next to the creds
		"--gossip-listen", "127.0.0.1:0", "--join", ad[4])
	base := a.httpAPI(t, 60*time.Second)
	b.httpAPI(t, 60*time.Second)
	// A's request goes over A's NATS server, the route, and B's server to the node.
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last reply: %s\ncontroller A:\n%s\ncontroller B:\n%s", last, a.errb.String(), b.errb.String())
		}
	})
	testutil.Eventually(t, 30*time.Second, func() bool {
		req, _ := http.NewRequest("POST", base+"/v1/sessions", bytes.NewReader([]byte(`{"node":"rn"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		last = resp.Status + " " + string(body)
		var s api.Session
		return resp.StatusCode/100 == 2 && json.Unmarshal(body, &s) == nil && s.Node == "rn"
	}, "controller A creates a session on the node behind controller B's NATS server")
}
