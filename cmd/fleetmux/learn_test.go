package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestControllerLearnsNodesFromNATS: a controller whose gossip seeds are all
// dead (several of them) lists every node connected to NATS, alive with its
// labels, within 5 s of its start, and reaches each; so does the same
// controller restarted with the same dead seeds. It answered `unknown node`
// before: the node table was filled from gossip alone.
func TestControllerLearnsNodesFromNATS(t *testing.T) {
	needBash(t)
	dir := t.TempDir()
	dataA, dataB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	const token = "learn-test-token"
	t.Setenv(envToken, token)
	if _, _, err := runArgs(t, "controller", "init", "--data", dataA); err != nil {
		t.Fatal(err)
	}
	ctlCreds := filepath.Join(dir, "ctl-b.creds")
	if _, _, err := runArgs(t, "enroll", "controller", "ctl-b", "--data", dataA, "--out", ctlCreds); err != nil {
		t.Fatal(err)
	}
	copyKeys(t, filepath.Join(dir, "ctl-b.keys"), filepath.Join(dataB, "keys"))
	ad := freeAddrs(t, 4) // nats A; gossip A; two dead seeds
	a := startInproc(t, "controller", "--name", "ctl-a", "--data", dataA, "--nats-listen", ad[0], "--http-listen", "127.0.0.1:0",
		"--gossip-listen", ad[1], "--ssh-listen", "off")
	nodes := []string{"ln1", "ln2", "ln3"}
	var procs []*inproc
	for i, n := range nodes {
		creds := filepath.Join(dir, n+".creds")
		if _, _, err := runArgs(t, "enroll", "node", n, "--data", dataA, "--out", creds); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(dir, n)
		copyKeys(t, filepath.Join(dir, n+".keys"), filepath.Join(data, "keys"))
		endHolder(t, data)
		procs = append(procs, startInproc(t, "node", "--name", n, "--data", data, "--nats", "nats://"+ad[0], "--nats-creds", creds,
			"--trust-root", filepath.Join(dir, n+".keys", "fleet.pub"), "--label", fmt.Sprintf("idx=%d", i+1),
			"--gossip-listen", "127.0.0.1:0", "--join", ad[1]))
	}
	// Every node is connected (controller A's embedded server knows them) before
	// controller B starts, so that B's clock measures B alone.
	peerA := &apiPeer{base: a.httpAPI(t, 60*time.Second), token: token}
	testutil.Eventually(t, 30*time.Second, func() bool { _, b := peerA.do("GET", "/v1/nodes", ""); return listsAll(b, nodes) }, "controller A lists every node")

	// Controller B: the same NATS, and gossip seeds that are not there.
	argsB := []string{"controller", "--name", "ctl-b", "--data", dataB, "--nats", "nats://" + ad[0], "--nats-creds", ctlCreds,
		"--http-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0", "--join", ad[2] + "," + ad[3], "--ssh-listen", "off"}
	for round := range 2 {
		began := time.Now()
		b := startInproc(t, argsB...)
		peer := &apiPeer{base: b.httpAPI(t, 60*time.Second), token: token}
		var last []byte
		testutil.Eventually(t, 30*time.Second, func() bool {
			for _, p := range procs {
				p.running(t)
			}
			_, last = peer.do("GET", "/v1/nodes", "")
			return listsAll(last, nodes)
		}, "controller B lists every node, alive with its labels (last: %s; controller B:\n%s)", &last, &b.errb)
		took := time.Since(began)
		t.Logf("start %d of controller B (seeds %s, %s dead): every node listed %v after its start", round+1, ad[2], ad[3], took.Round(time.Millisecond))
		if took > 5*time.Second {
			t.Errorf("start %d of controller B listed every node %v after its start, want within 5s", round+1, took)
		}
		for _, n := range nodes {
			code, body := peer.do("POST", "/v1/sessions", `{"node":"`+n+`"}`)
			var s api.Session
			if code/100 != 2 || json.Unmarshal(body, &s) != nil || s.Node != n {
				t.Fatalf("a session on %s through controller B: %d %s", n, code, body)
			}
		}
		if err := b.stop(); err != nil {
			t.Fatalf("controller B: %v", err)
		}
	}
}

// listsAll reports whether a GET /v1/nodes reply lists every node of nodes
// alive, the i-th with the label idx=i+1.
func listsAll(reply []byte, nodes []string) bool {
	var nl api.NodeList
	if json.Unmarshal(reply, &nl) != nil {
		return false
	}
	listed := 0
	for _, n := range nl.Nodes {
		for i, want := range nodes {
			if n.Name == want && n.Status == api.NodeAlive && n.Labels["idx"] == fmt.Sprint(i+1) {
				listed++
			}
		}
	}
	return listed == len(nodes)
}

// apiPeer sends HTTP API requests with a token.
type apiPeer struct{ base, token string }

func (p *apiPeer) do(method, path, body string) (int, []byte) {
	req, err := http.NewRequest(method, p.base+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
