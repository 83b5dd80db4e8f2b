package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestControllerLearnsNodesFromNATS: a controller whose only gossip seed is
// dead still lists every node connected to NATS, with its labels, within
// seconds, and reaches it. It answered `unknown node` before: the node table
// was filled from gossip alone.
func TestControllerLearnsNodesFromNATS(t *testing.T) {
	needBash(t)
	dir := t.TempDir()
	dataA, dataB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	const token = "learn-test-token"
	t.Setenv(envToken, token)
	if _, _, err := runArgs(t, "controller", "init", "--data", dataA); err != nil {
		t.Fatal(err)
	}
	nodeCreds, ctlCreds := filepath.Join(dir, "n.creds"), filepath.Join(dir, "ctl-b.creds")
	if _, _, err := runArgs(t, "enroll", "node", "ln", "--data", dataA, "--out", nodeCreds); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runArgs(t, "enroll", "controller", "ctl-b", "--data", dataA, "--out", ctlCreds); err != nil {
		t.Fatal(err)
	}
	copyKeys(t, filepath.Join(dir, "ctl-b.keys"), filepath.Join(dataB, "keys"))
	copyKeys(t, filepath.Join(dir, "n.keys"), filepath.Join(dir, "node", "keys"))
	ad := freeAddrs(t, 3) // nats A; gossip A; a dead seed
	startInproc(t, "controller", "--name", "ctl-a", "--data", dataA, "--nats-listen", ad[0], "--http-listen", "127.0.0.1:0",
		"--gossip-listen", ad[1], "--ssh-listen", "off")
	endHolder(t, filepath.Join(dir, "node"))
	nd := startInproc(t, "node", "--name", "ln", "--data", filepath.Join(dir, "node"), "--nats", "nats://"+ad[0], "--nats-creds", nodeCreds,
		"--trust-root", filepath.Join(dir, "n.keys", "fleet.pub"), "--label", "env=ci",
		"--gossip-listen", "127.0.0.1:0", "--join", ad[1])

	// Controller B: the same NATS, and a gossip seed that is not there.
	b := startInproc(t, "controller", "--name", "ctl-b", "--data", dataB, "--nats", "nats://"+ad[0], "--nats-creds", ctlCreds,
		"--http-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0", "--join", ad[2], "--ssh-listen", "off")
	base := b.httpAPI(t, 60*time.Second)
	do := func(method, path, body string) (int, []byte) {
		req, _ := http.NewRequest(method, base+path, bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	began := time.Now()
	var last []byte
	testutil.Eventually(t, 30*time.Second, func() bool {
		nd.running(t)
		var nl api.NodeList
		_, last = do("GET", "/v1/nodes", "")
		if json.Unmarshal(last, &nl) != nil {
			return false
		}
		for _, n := range nl.Nodes {
			if n.Name == "ln" && n.Status == api.NodeAlive && n.Labels["env"] == "ci" {
				return true
			}
		}
		return false
	}, "controller B lists the node, alive with its labels (last: %s; controller B:\n%s)", &last, &b.errb)
	t.Logf("listed %v after controller B's API came up", time.Since(began).Round(time.Millisecond))
	code, body := do("POST", "/v1/sessions", `{"node":"ln"}`)
	var s api.Session
	if code/100 != 2 || json.Unmarshal(body, &s) != nil || s.Node != "ln" {
		t.Fatalf("a session on the node through controller B: %d %s", code, body)
	}
}
