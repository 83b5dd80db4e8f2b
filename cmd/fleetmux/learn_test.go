package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type proc struct {
		out, errb testutil.Buffer
		done      chan struct{}
		err       error
	}
	start := func(args ...string) *proc {
		p := &proc{done: make(chan struct{})}
		go func() { p.err = run(ctx, args, &p.out, &p.errb); close(p.done) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				t.Errorf("%v did not stop", args[:3])
			}
		})
		return p
	}
	httpRE := regexp.MustCompile(`HTTP API: (http://\S+)`)
	up := func(p *proc) string {
		var base string
		testutil.Eventually(t, 60*time.Second, func() bool {
			select {
			case <-p.done:
				t.Fatalf("a controller stopped: %v\n%s", p.err, p.errb.String())
			default:
			}
			m := httpRE.FindStringSubmatch(p.out.String())
			if m != nil {
				base = m[1]
			}
			return m != nil
		}, "a controller up")
		return base
	}
	start("controller", "--name", "ctl-a", "--data", dataA, "--nats-listen", ad[0], "--http-listen", "127.0.0.1:0",
		"--gossip-listen", ad[1], "--ssh-listen", "off")
	endHolder(t, filepath.Join(dir, "node"))
	nd := start("node", "--name", "ln", "--data", filepath.Join(dir, "node"), "--nats", "nats://"+ad[0], "--nats-creds", nodeCreds,
		"--trust-root", filepath.Join(dir, "n.keys", "fleet.pub"), "--label", "env=ci",
		"--gossip-listen", "127.0.0.1:0", "--join", ad[1])

	// Controller B: the same NATS, and a gossip seed that is not there.
	b := start("controller", "--name", "ctl-b", "--data", dataB, "--nats", "nats://"+ad[0], "--nats-creds", ctlCreds,
		"--http-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0", "--join", ad[2], "--ssh-listen", "off")
	base := up(b)
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
		select {
		case <-nd.done:
			t.Fatalf("the node stopped: %v\n%s", nd.err, nd.errb.String())
		default:
		}
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
