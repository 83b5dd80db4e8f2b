package fleet_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/nats-io/nats.go"
)

// TestFleet runs a controller with an embedded NATS server (A), a second controller
// connected to that server (B) and three node agents, each a process of its own (in
// its own network namespace when running as root), and drives them through the
// HTTP API: discovery, sessions, fan-out, a node killed in the middle of a fan-out
// and restarted, a controller killed and restarted while a client follows a
// command's output, and bad input.
//
// It uses fixed ports (picked free up front, so that restarted processes come back
// on the same addresses): not parallel.
func TestFleet(t *testing.T) {
	started := time.Now()
	root := t.TempDir()
	names := []string{"n1", "n2", "n3"}
	roles := map[string]string{"n1": "web", "n2": "db", "n3": "web"}
	nw := setupNetwork(t, names)
	f := newFleet(t, root, nw)

	gossipKey := randomHex(32)
	// Secrets go in files, never in argv: the gossip key, and each process's NATS
	// credentials, enrolled from the fleet's authority (controller A's data dir).
	gossipKeyFile := filepath.Join(root, "gossip.key")
	if err := os.WriteFile(gossipKeyFile, []byte(gossipKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.run("controller", "init", "--data", filepath.Join(root, "ctl"))
	// enroll also writes what goes into the process's DIR/keys/ (a node's fleet.pub,
	// a controller's signing key and certificate): install it there.
	creds := func(kind, name string, extra ...string) string {
		file := filepath.Join(root, "creds", kind+"-"+name+".creds")
		f.run(append([]string{"enroll", kind, name, "--data", filepath.Join(root, "ctl"), "--out", file}, extra...)...)
		if kind != "subscriber" {
			installKeys(t, strings.TrimSuffix(file, ".creds")+".keys", filepath.Join(root, name, "keys"))
		}
		return file
	}
	if err := os.MkdirAll(filepath.Join(root, "creds"), 0o700); err != nil {
		t.Fatal(err)
	}
	hostPorts := freePorts(t, nw.hostIP, 3)
	natsAddr := net.JoinHostPort(nw.hostIP, strconv.Itoa(hostPorts[0]))
	gossipA := net.JoinHostPort(nw.hostIP, strconv.Itoa(hostPorts[1]))
	gossipB := net.JoinHostPort(nw.hostIP, strconv.Itoa(hostPorts[2]))
	httpB := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePorts(t, "127.0.0.1", 1)[0]))
	natsURL := "nats://" + natsAddr

	// The nodes' gossip addresses: the namespace's own address on the usual port, or
	// free loopback ports (kept across a restart).
	nodeGossip := map[string]string{}
	for _, n := range names {
		if nw.netns {
			nodeGossip[n] = net.JoinHostPort(nw.nodeIP[n], "7946")
		}
	}
	if !nw.netns {
		ports := freePorts(t, "127.0.0.1", len(names))
		for i, n := range names {
			nodeGossip[n] = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i]))
		}
	}

	creds("controller", "ctl") // controller A's signing key and certificate, in its DIR/keys
	ctlA := f.start("ctl", "", "controller", "--name", "ctl", "--data", filepath.Join(root, "ctl"),
		"--nats-listen", natsAddr,
		"--http-listen", "127.0.0.1:0",
		"--gossip-listen", gossipA, "--gossip-key-file", gossipKeyFile)
	a := &apiClient{f: f, base: f.waitHTTPAPI(ctlA, 30*time.Second)}
	argsB := []string{"controller", "--name", "ctl2", "--data", filepath.Join(root, "ctl2"),
		"--nats", natsURL, "--nats-creds", creds("controller", "ctl2"),
		"--http-listen", httpB,
		"--gossip-listen", gossipB, "--gossip-key-file", gossipKeyFile, "--join", gossipA}
	ctlB := f.start("ctl2", "", argsB...)
	nodeCreds := map[string]string{}
	for _, n := range names {
		nodeCreds[n] = creds("node", n)
	}
	subCreds := creds("subscriber", "dash")
	nodeArgs := func(n string) []string {
		return []string{"node", "--name", n, "--nats", natsURL, "--nats-creds", nodeCreds[n],
			"--data", filepath.Join(root, n),
			"--gossip-listen", nodeGossip[n], "--gossip-key-file", gossipKeyFile, "--join", gossipA,
			"--label", "role=" + roles[n], "--label", "idx=" + strings.TrimPrefix(n, "n")}
	}
	procs := map[string]*proc{}
	for _, n := range names {
		procs[n] = f.start(n, nw.nodeNS[n], nodeArgs(n)...)
	}
	if got := f.waitHTTPAPI(ctlB, 30*time.Second); got != "http://"+httpB {
		t.Fatalf("controller B serves on %s, want http://%s", got, httpB)
	}
	b := &apiClient{f: f, base: "http://" + httpB}
	f.eventually(10*time.Second, a.healthy, "controller A /healthz answers 200")
	t.Logf("setup: %v (netns: %v, NATS %s, gossip A %s, B %s)", time.Since(started).Round(time.Millisecond), nw.netns, natsAddr, gossipA, gossipB)

	// step runs one step as a subtest; the test stops at the first failing step.
	step := func(name string, fn func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, func(st *testing.T) {
			f.t = st
			defer func() { f.t = t }()
			fn(st)
		}) {
			t.FailNow()
		}
	}
	allAlive := func(c *apiClient, want ...string) func() bool {
		return func() bool {
			nodes := c.nodes()
			for _, n := range want {
				if nodes[n].Status != api.NodeAlive {
					return false
				}
			}
			return true
		}
	}

	step("security", func(t *testing.T) {
		// The embedded NATS server listens beyond loopback (with namespaces): it
		// speaks TLS only, and refuses clients without credentials of the fleet.
		if info, got := natsConnect(t, natsAddr); !strings.Contains(info, `"tls_required":true`) || strings.HasPrefix(got, "PONG") {
			t.Errorf("plain NATS CONNECT: INFO %q, then %q; want TLS required and no PONG", info, got)
		}
		ca := filepath.Join(root, "ctl", "keys", "nats-ca.crt")
		for name, opt := range map[string]nats.Option{"anonymous": nats.Name("anon"), "token": nats.Token("guess"), "user": nats.UserInfo("admin", "admin")} {
			if nc, err := nats.Connect(natsURL, opt, nats.RootCAs(ca), nats.NoReconnect()); err == nil {
				nc.Close()
				t.Errorf("%s: connected", name)
			} else if !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("%s: %v, want an authorization violation", name, err)
			}
		}
		// A subscriber reads output but cannot reach a node's rpc.
		violations := make(chan error, 8)
		nc, err := nats.Connect(natsURL, nats.UserCredentials(subCreds), nats.RootCAs(subCreds), nats.NoReconnect(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
		if err != nil {
			t.Fatalf("subscriber: %v", err)
		}
		defer nc.Close()
		if err := nc.Publish("fleetmux.rpc.n1.create", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violations:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("subscriber publishing to rpc: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("subscriber publishing to rpc: no permissions violation")
		}
		if !nw.netns {
			t.Log("listeners beyond loopback not checked: no network namespaces")
			return
		}
		// Gossip needs a key (on loopback too), and a node its NATS credentials.
		ports := freePorts(t, nw.hostIP, 2)
		p := f.start("ctl-insecure", "", "controller", "--name", "ctlx", "--data", filepath.Join(root, "ctlx"),
			"--nats-listen", net.JoinHostPort(nw.hostIP, strconv.Itoa(ports[0])), "--http-listen", "127.0.0.1:0",
			"--gossip-listen", net.JoinHostPort(nw.hostIP, strconv.Itoa(ports[1])))
		expectRefusal(t, p, "gossip needs a key")
		p = f.start("n-insecure", nw.nodeNS["n1"], "node", "--name", "nx", "--nats", natsURL, "--nats-creds", nodeCreds["n1"],
			"--data", filepath.Join(root, "nx"), "--gossip-listen", net.JoinHostPort(nw.nodeIP["n1"], "7947"))
		expectRefusal(t, p, "gossip needs a key")
		p = f.start("n-nocreds", nw.nodeNS["n1"], "node", "--name", "ny", "--nats", natsURL,
			"--data", filepath.Join(root, "ny"), "--gossip-listen", net.JoinHostPort(nw.nodeIP["n1"], "7948"), "--gossip-key-file", gossipKeyFile)
		expectRefusal(t, p, "--nats-creds")
	})

	step("discovery", func(t *testing.T) {
		for _, c := range []*apiClient{a, b} {
			f.eventually(20*time.Second, allAlive(c, names...), "%s lists n1, n2, n3 alive", c.base)
			for _, n := range names { // see TestFleetNodeAliveMeansServing
				f.eventually(10*time.Second, func() bool { return c.serves(n) }, "%s answers through %s", n, c.base)
			}
			// Alive may come from NATS presence before gossip has brought a node's
			// address to this controller: discovery is eventually whole.
			f.eventually(10*time.Second, func() bool {
				nodes := c.nodes()
				for _, n := range names {
					if nodes[n].Addr != nodeGossip[n] {
						return false
					}
				}
				return true
			}, "%s lists each node's gossip address", c.base)
			nodes := c.nodes()
			for _, n := range names {
				got := nodes[n]
				if got.Labels["role"] != roles[n] || got.Labels["idx"] != strings.TrimPrefix(n, "n") {
					t.Errorf("%s: node %s labels %v, want role=%s idx=%s", c.base, n, got.Labels, roles[n], strings.TrimPrefix(n, "n"))
				}
				if got.Addr != nodeGossip[n] {
					t.Errorf("%s: node %s addr %q, want %q", c.base, n, got.Addr, nodeGossip[n])
				}
			}
			for _, ctl := range []string{"ctl", "ctl2"} {
				if _, ok := nodes[ctl]; ok {
					t.Errorf("%s: controller %s listed as a node", c.base, ctl)
				}
			}
		}
	})

	firstSession := map[string]string{} // node → the id of its first session
	step("sessions", func(t *testing.T) {
		for _, n := range names {
			var s api.Session
			r := a.call(http.MethodPost, "/v1/sessions", map[string]string{"node": n}, http.StatusCreated, &s)
			if s.Node != n || s.ID == "" || r.header.Get("Location") != "/v1/sessions/"+n+"/"+s.ID {
				t.Fatalf("create on %s: session %s/%s, Location %q", n, s.Node, s.ID, r.header.Get("Location"))
			}
			firstSession[n] = s.ID
			var br api.BlockResult
			a.call(http.MethodPost, "/v1/sessions/"+n+"/"+s.ID+"/run", api.RunBody{Command: "echo hi-" + n, TimeoutMS: 15000}, http.StatusOK, &br)
			checkDone(t, n, br.Block, br.Text, "hi-"+n)
		}
	})

	step("fanout", func(t *testing.T) {
		var out api.Fanout
		a.call(http.MethodPost, "/v1/run", api.FanoutRequest{Selector: api.Selector{All: true}, Command: "echo fan", TimeoutMS: 20000}, http.StatusOK, &out)
		if len(out.Results) != 3 || out.OK != 3 || out.Failed != 0 {
			t.Fatalf("fan-out to all: %d results, ok %d, failed %d: %+v", len(out.Results), out.OK, out.Failed, out.Results)
		}
		var got []string
		t.Logf("fan-out to all: %s", durations(out))
		for _, r := range out.Results {
			got = append(got, r.Node)
			if r.Error != nil || r.Block == nil {
				t.Errorf("%s: error %v, block %v", r.Node, r.Error, r.Block)
				continue
			}
			checkDone(t, r.Node, *r.Block, r.Text, "fan")
		}
		if slices.Sort(got); !slices.Equal(got, names) {
			t.Errorf("fan-out targets %v, want %v", got, names)
		}
		// By label, through the other controller.
		out = api.Fanout{}
		b.call(http.MethodPost, "/v1/run", api.FanoutRequest{Selector: api.Selector{Labels: map[string]string{"role": "web"}}, Command: "echo web", TimeoutMS: 20000}, http.StatusOK, &out)
		got = nil
		t.Logf("fan-out to role=web through controller B: %s", durations(out))
		for _, r := range out.Results {
			got = append(got, r.Node)
			if r.Error != nil || strings.TrimSpace(r.Text) != "web" {
				t.Errorf("role=web fan-out, %s: error %v, text %q", r.Node, r.Error, r.Text)
			}
		}
		if slices.Sort(got); !slices.Equal(got, []string{"n1", "n3"}) || out.OK != 2 {
			t.Errorf("role=web fan-out: targets %v, ok %d; want n1, n3", got, out.OK)
		}
	})

	step("node-killed", func(t *testing.T) {
		const cmd = "sleep 3; echo done"
		type result struct {
			r   reply
			err error
			at  time.Time
		}
		ch := make(chan result, 1)
		go func() { // joined below (the request is bounded by its context)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := a.send(ctx, http.MethodPost, "/v1/run", api.FanoutRequest{Selector: api.Selector{All: true}, Command: cmd, TimeoutMS: 30000})
			ch <- result{r, err, time.Now()}
		}()
		var fanResult *result
		defer func() {
			if fanResult == nil {
				<-ch // never leave the request behind
			}
		}()
		// Kill n2 once the command runs there (its session is running it).
		running := func(node string) bool {
			var l api.SessionList
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := a.send(ctx, http.MethodGet, "/v1/sessions?node="+node, nil)
			if err != nil || r.status != http.StatusOK || jsonDecode(r.body, &l) != nil {
				return false
			}
			for _, s := range l.Sessions {
				if s.State == "running" && s.CurrentCommand == cmd {
					return true
				}
			}
			return false
		}
		f.eventually(15*time.Second, func() bool { return running("n2") }, "n2 runs %q", cmd)
		t.Logf("n2 runs the command; n1 running: %v, n3 running: %v", running("n1"), running("n3"))
		killed := time.Now()
		f.kill(procs["n2"])

		var res result
		select {
		case res = <-ch:
			fanResult = &res
		case <-time.After(25 * time.Second):
			t.Fatalf("the fan-out did not return within 25s of n2's death")
		}
		took := res.at.Sub(killed)
		t.Logf("fan-out returned %v after n2 was killed", took.Round(time.Millisecond))
		if res.err != nil {
			t.Fatalf("fan-out: %v", res.err)
		}
		if took > 15*time.Second {
			t.Errorf("the fan-out took %v after n2's death, want ≤ 15s", took)
		}
		var out api.Fanout
		if res.r.status != http.StatusOK || jsonDecode(res.r.body, &out) != nil {
			t.Fatalf("fan-out: %s", res.r)
		}
		if len(out.Results) != 3 || out.OK != 2 || out.Failed != 1 {
			t.Errorf("fan-out: %d results, ok %d, failed %d, want 3, 2, 1", len(out.Results), out.OK, out.Failed)
		}
		for _, r := range out.Results {
			switch r.Node {
			case "n2":
				if r.Error == nil {
					t.Errorf("n2 (killed): no error: %+v", r)
					continue
				}
				t.Logf("n2's result: code %q: %s (after %d ms)", r.Error.Code, r.Error.Message, r.DurationMS)
				if r.Error.Code != api.CodeUnavailable && r.Error.Code != api.CodeTimeout {
					t.Errorf("n2 (killed): error code %q, want %q or %q", r.Error.Code, api.CodeUnavailable, api.CodeTimeout)
				}
			default:
				if r.Error != nil || r.Block == nil {
					t.Errorf("%s: error %v", r.Node, r.Error)
					continue
				}
				checkDone(t, r.Node, *r.Block, r.Text, "done")
			}
		}

		f.eventually(30*time.Second, func() bool { return a.nodes()["n2"].Status == api.NodeDead }, "n2 is dead in GET /v1/nodes")
		t.Logf("n2 dead in the node table %v after it was killed", time.Since(killed).Round(time.Millisecond))

		// Requests to a dead node fail fast and clearly.
		r := a.do(http.MethodGet, "/v1/sessions/n2/"+firstSession["n2"], nil)
		if r.took > 3*time.Second {
			t.Errorf("GET a session of dead n2 took %v, want < 3s", r.took)
		}
		if e := r.apiErr(); r.status != http.StatusServiceUnavailable || e == nil || e.Code != api.CodeUnavailable {
			t.Errorf("GET a session of dead n2: %s, want 503 %s", r, api.CodeUnavailable)
		}
		r = a.do(http.MethodPost, "/v1/sessions", map[string]string{"node": "n2"})
		if e := r.apiErr(); r.status != http.StatusServiceUnavailable || e == nil || e.Code != api.CodeUnavailable || r.took > 3*time.Second {
			t.Errorf("create on dead n2: %s in %v, want 503 %s at once", r, r.took, api.CodeUnavailable)
		}
		// A fan-out to all leaves the dead node out.
		out = api.Fanout{}
		a.call(http.MethodPost, "/v1/run", api.FanoutRequest{Selector: api.Selector{All: true}, Command: "echo still", TimeoutMS: 20000}, http.StatusOK, &out)
		if len(out.Results) != 2 || out.OK != 2 {
			t.Errorf("fan-out to all with n2 dead: %+v, want n1 and n3 ok", out)
		}
	})

	step("node-restart", func(t *testing.T) {
		restarted := time.Now()
		procs["n2"] = f.start("n2", nw.nodeNS["n2"], nodeArgs("n2")...)
		f.eventually(30*time.Second, allAlive(a, "n2"), "n2 alive again on controller A")
		t.Logf("n2 alive again %v after its restart", time.Since(restarted).Round(time.Millisecond))
		// A node is listed alive a moment before it serves (TestFleetNodeAliveMeansServing
		// exposes that race); this test is about the restart, so it waits it out.
		f.eventually(10*time.Second, func() bool { return a.serves("n2") }, "n2 answers requests")
		var s api.Session
		a.call(http.MethodPost, "/v1/sessions", map[string]string{"node": "n2"}, http.StatusCreated, &s)
		if s.ID == firstSession["n2"] {
			t.Errorf("n2 reused session id %s after its restart (same data dir)", s.ID)
		}
		var br api.BlockResult
		a.call(http.MethodPost, "/v1/sessions/n2/"+s.ID+"/run", api.RunBody{Command: "echo back-n2", TimeoutMS: 15000}, http.StatusOK, &br)
		checkDone(t, "n2", br.Block, br.Text, "back-n2")
		f.eventually(30*time.Second, allAlive(b, names...), "n1, n2, n3 alive on controller B")
	})

	step("controller-restart", func(t *testing.T) {
		// The loop prints numbered lines until the test creates the stop file, so
		// it is certainly still running when controller B comes back.
		stopFile := filepath.Join(root, "stop-loop")
		loop := "i=0; until [ -e " + stopFile + " ]; do i=$((i+1)); echo line-$i; sleep 0.01; done"
		var s api.Session
		b.call(http.MethodPost, "/v1/sessions", map[string]string{"node": "n1"}, http.StatusCreated, &s)
		sess := "/v1/sessions/n1/" + s.ID
		var br api.BlockResult
		b.call(http.MethodPost, sess+"/run", api.RunBody{Command: loop, TimeoutMS: 200}, http.StatusOK, &br)
		if br.Block.State != "running" || br.Block.Command != loop {
			t.Fatalf("run with timeout_ms 200: block %+v, want the running loop", br.Block)
		}
		followed := &testutil.Buffer{}
		fl := b.follow("n1", s.ID, 0, followed)
		if got := fl.resp.Header.Get(api.HeaderOffset); got != "0" {
			t.Errorf("follow from 0: %s %q", api.HeaderOffset, got)
		}
		line50 := regexp.MustCompile(`line-50\r?\n`)
		f.eventually(20*time.Second, func() bool { return line50.Match(followed.Bytes()) }, "line-50 followed through controller B")
		f.kill(ctlB)
		killed := time.Now()
		select {
		case <-fl.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the follow stream did not end within 10s of controller B's death")
		}
		offset := followed.Len()
		t.Logf("controller B killed with %d bytes followed (stream ended with %v)", offset, fl.err)
		if fl.err == nil {
			t.Errorf("the follow stream ended cleanly when its controller was killed; want an error (a cut stream)")
		}

		// Let the command write a good part of its output while no controller
		// follows it (as seen through controller A), so that the resumed stream has
		// a backlog to read from the node before it goes live again.
		f.eventually(20*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := a.send(ctx, http.MethodGet, sess, nil)
			var cur api.Session
			return err == nil && r.status == http.StatusOK && jsonDecode(r.body, &cur) == nil && cur.OutputOffset >= int64(offset)+1000
		}, "1000 more bytes of output while controller B is down")
		ctlB = f.start("ctl2", "", argsB...)
		if got := f.waitHTTPAPI(ctlB, 30*time.Second); got != "http://"+httpB {
			t.Fatalf("restarted controller B serves on %s, want http://%s", got, httpB)
		}
		f.eventually(20*time.Second, b.healthy, "restarted controller B /healthz answers 200")
		f.eventually(30*time.Second, allAlive(b, "n1"), "n1 alive on the restarted controller B")
		var mid api.Session
		b.call(http.MethodGet, sess, nil, http.StatusOK, &mid)
		t.Logf("controller B back %v after it was killed; the session is %s at output offset %d (%d bytes to catch up)", time.Since(killed).Round(time.Millisecond), mid.State, mid.OutputOffset, mid.OutputOffset-int64(offset))
		if mid.State != "running" || mid.CurrentCommand != loop {
			t.Fatalf("after controller B's restart the session is %q running %q; want the loop still running", mid.State, mid.CurrentCommand)
		}

		fl = b.follow("n1", s.ID, offset, followed)
		if got := fl.resp.Header.Get(api.HeaderOffset); got != strconv.Itoa(offset) {
			t.Errorf("resumed follow from %d: %s %q", offset, api.HeaderOffset, got)
		}
		// Some live output through the resumed stream, then stop the loop.
		f.eventually(20*time.Second, func() bool { return followed.Len() > int(mid.OutputOffset)+200 }, "live output through the resumed stream")
		if err := os.WriteFile(stopFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		var wr api.WaitResult
		b.call(http.MethodGet, sess+"/wait?until=idle&timeout_ms=20000", nil, http.StatusOK, &wr)
		if !wr.OK || wr.Session.State != "idle" {
			t.Fatalf("wait until idle: ok %v, state %q", wr.OK, wr.Session.State)
		}
		if wr.Block.Command != loop || wr.Block.State != "done" || wr.Block.ExitCode == nil || *wr.Block.ExitCode != 0 {
			t.Errorf("the loop's block: %+v, want done with exit code 0", wr.Block)
		}

		// Everything followed, across the restart, is exactly the session's output.
		// The session is idle, but its prompt may still be on its way: compare once
		// the stream holds as many bytes as the output (a longer stream, duplicates,
		// shows as a mismatch when the time is up).
		var raw, got []byte
		for deadline := time.Now().Add(15 * time.Second); ; {
			raw = b.rawOutput("n1", s.ID)
			got = followed.Bytes()
			if len(got) == len(raw) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond) // polling with a deadline
		}
		fl.stop()
		if !bytes.Equal(got, raw) {
			i := 0
			for i < len(got) && i < len(raw) && got[i] == raw[i] {
				i++
			}
			t.Fatalf("followed %d bytes (%d before the restart), the output is %d bytes: first difference at %d:\nfollowed: %q\nraw:      %q",
				len(got), offset, len(raw), i, around(got, i), around(raw, i))
		}
		var seen []int
		for _, m := range regexp.MustCompile(`line-(\d+)\r?\n`).FindAllSubmatch(got, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			seen = append(seen, n)
		}
		want := make([]int, len(seen))
		for i := range want {
			want[i] = i + 1
		}
		if len(seen) < 100 || !slices.Equal(seen, want) {
			t.Errorf("followed lines: %d of them, want line-1 … line-N in order (N ≥ 100); got %v", len(seen), seen)
		}
		if offset <= 0 || offset >= len(raw) {
			t.Errorf("offset at the kill %d of %d: the restart was not mid-way", offset, len(raw))
		}

		// The session survived the controller's restart.
		var after api.Session
		b.call(http.MethodGet, sess, nil, http.StatusOK, &after)
		if after.State != "idle" || after.LastExitCode == nil || *after.LastExitCode != 0 {
			t.Errorf("session after the restart: state %q, last exit code %v; want idle, 0", after.State, after.LastExitCode)
		}
		var bl api.BlockList
		b.call(http.MethodGet, sess+"/blocks", nil, http.StatusOK, &bl)
		if len(bl.Blocks) != 1 || bl.Blocks[0].ExitCode == nil || *bl.Blocks[0].ExitCode != 0 {
			t.Errorf("blocks after the restart: %+v, want the loop, exit code 0", bl.Blocks)
		}
	})

	step("bad-input", func(t *testing.T) {
		n1 := "/v1/sessions/n1/" + firstSession["n1"]
		for _, c := range []struct {
			method, path string
			body         any
			status       int
			code         string
		}{
			{http.MethodGet, "/v1/sessions/nope/s1", nil, http.StatusNotFound, api.CodeNotFound},
			{http.MethodPost, "/v1/sessions", map[string]string{"node": "nope"}, http.StatusNotFound, api.CodeNotFound},
			{http.MethodPost, "/v1/sessions/nope/s1/run", api.RunBody{Command: "true"}, http.StatusNotFound, api.CodeNotFound},
			{http.MethodGet, "/v1/sessions/n1/s999999", nil, http.StatusNotFound, api.CodeNotFound},
			{http.MethodPost, "/v1/sessions", `{"node": "n1",`, http.StatusBadRequest, api.CodeBadRequest},
			{http.MethodPost, "/v1/run", `not json`, http.StatusBadRequest, api.CodeBadRequest},
			{http.MethodPost, n1 + "/run", `{"command": 1}`, http.StatusBadRequest, api.CodeBadRequest},
			{http.MethodPost, n1 + "/run", `{"command": "true", "bogus": 1}`, http.StatusBadRequest, api.CodeBadRequest},
			{http.MethodGet, "/v1/sessions/bad.name/s1", nil, http.StatusBadRequest, api.CodeBadRequest},
		} {
			r := a.do(c.method, c.path, c.body)
			if e := r.apiErr(); r.status != c.status || e == nil || e.Code != c.code || e.Message == "" {
				t.Errorf("%s %s %v: %s, want %d %s", c.method, c.path, c.body, r, c.status, c.code)
			}
		}
		// Nothing changed: the session is still there and idle.
		var s api.Session
		a.call(http.MethodGet, n1, nil, http.StatusOK, &s)
		if s.State != "idle" || s.Blocks != 1 {
			t.Errorf("n1's first session after bad input: state %q, %d blocks; want idle, 1", s.State, s.Blocks)
		}
	})
	t.Logf("total %v", time.Since(started).Round(time.Millisecond))
}

// checkDone checks a finished block with exit code 0 and the text want.
func checkDone(t *testing.T, node string, b api.Block, text, want string) {
	t.Helper()
	if b.State != "done" || b.ExitCode == nil || *b.ExitCode != 0 {
		t.Errorf("%s: block %+v, want done with exit code 0", node, b)
	}
	if strings.TrimSpace(text) != want {
		t.Errorf("%s: block text %q, want %q", node, text, want)
	}
}

// expectRefusal waits for a process that must refuse to start and checks its exit
// and message.
func expectRefusal(t *testing.T, p *proc, msg string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s still runs after 20s; want a refusal to start", p.name)
	}
	p.mu.Lock()
	p.killed = true // it was meant to exit
	p.mu.Unlock()
	if p.err == nil || !strings.Contains(p.stderr.String(), msg) {
		t.Errorf("%s: exit %v, stderr %q; want a failure saying %q", p.name, p.err, p.stderr.String(), msg)
	}
}

// natsConnect speaks the plain NATS client protocol to addr: CONNECT without TLS
// or credentials, then PING; it returns the first line after INFO ("PONG", or
// "-ERR ...", or the error that ended the connection) with the INFO line.
func natsConnect(t *testing.T, addr string) (info, reply string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial NATS %s: %v", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(conn)
	info, err = rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") {
		t.Fatalf("NATS %s: first line %q, %v", addr, info, err)
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", `{"verbose":false,"pedantic":false,"name":"fleet-test"}`); err != nil {
		t.Fatalf("NATS %s: %v", addr, err)
	}
	line, err := rd.ReadString('\n')
	if err != nil && line == "" {
		return info, "error: " + err.Error()
	}
	return info, strings.TrimSpace(line)
}

func jsonDecode(data []byte, v any) error { return json.Unmarshal(data, v) }

// durations lists how long each target of a fan-out took.
func durations(out api.Fanout) string {
	var parts []string
	for _, r := range out.Results {
		parts = append(parts, fmt.Sprintf("%s %d ms", r.Node, r.DurationMS))
	}
	return strings.Join(parts, ", ")
}

// around returns up to 60 bytes of b around i.
func around(b []byte, i int) []byte {
	return b[max(0, i-30):min(len(b), i+30)]
}

// TestFleetNodeAliveMeansServing starts node agents whose NATS connection has a
// latency of 100 ms each way (a node far from its broker; gossip goes direct) and
// sends each a request the moment the controller lists it alive: a node the
// controller lists alive must answer. It exposes a start-up race in cmd/fleetmux
// (startNode): the node joins the gossip cluster before it serves its NATS
// subjects, so for at least one NATS round trip the controller routes requests to an
// alive node that nobody serves, and they fail with 503 "unavailable: no agent
// serves it on the bus" (and the node is marked suspect). Without the latency the
// window is a few milliseconds and a request hits it now and then.
func TestFleetNodeAliveMeansServing(t *testing.T) {
	lf := startLoopbackFleet(t)
	a := lf.api
	proxy := startLatencyProxy(t, strings.TrimPrefix(lf.natsURL, "nats://"), 100*time.Millisecond)
	for i := range 2 {
		name := fmt.Sprintf("far%d", i+1)
		p := lf.startNodeVia(name, "nats://"+proxy.addr())
		lf.f.eventually(20*time.Second, func() bool { return a.nodes()[name].Status == api.NodeAlive }, "%s alive", name)
		r := a.do(http.MethodGet, "/v1/sessions?node="+name, nil)
		if r.status != http.StatusOK {
			t.Errorf("%s is alive in GET /v1/nodes, but GET /v1/sessions?node=%s right then: %s", name, name, r)
		}
		lf.f.eventually(20*time.Second, func() bool { return a.serves(name) }, "%s answers requests", name)
		p.signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not stop within 10s of SIGTERM", p.name)
		}
	}
}

// loopbackFleet is a controller with an embedded NATS server, all on loopback, and
// the nodes a test starts for it.
type loopbackFleet struct {
	f        *fleet
	api      *apiClient
	root     string
	natsURL  string
	gossipIn string // the controller's gossip address: the nodes' seed
}

func startLoopbackFleet(t *testing.T) *loopbackFleet {
	root := t.TempDir()
	f := newFleet(t, root, loopback(nil))
	ports := freePorts(t, "127.0.0.1", 2)
	natsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	gossip := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	// The fleet's authority, and the controller's own signing key in its DIR/keys.
	ctlData := filepath.Join(root, "ctl")
	f.run("controller", "init", "--data", ctlData)
	f.run("enroll", "controller", "ctl", "--data", ctlData, "--out", filepath.Join(root, "ctl.creds"))
	installKeys(t, filepath.Join(root, "ctl.keys"), filepath.Join(ctlData, "keys"))
	ctl := f.start("ctl", "", "controller", "--name", "ctl", "--data", filepath.Join(root, "ctl"),
		"--nats-listen", natsAddr, "--http-listen", "127.0.0.1:0", "--gossip-listen", gossip)
	a := &apiClient{f: f, base: f.waitHTTPAPI(ctl, 30*time.Second)}
	return &loopbackFleet{f: f, api: a, root: root, natsURL: "nats://" + natsAddr, gossipIn: gossip}
}

// startNodeVia starts a node agent that connects to NATS at natsURL.
func (lf *loopbackFleet) startNodeVia(name, natsURL string) *proc {
	port := freePorts(lf.f.t, "127.0.0.1", 1)[0]
	creds := filepath.Join(lf.root, name+".creds")
	lf.f.run("enroll", "node", name, "--data", filepath.Join(lf.root, "ctl"), "--out", creds)
	installKeys(lf.f.t, filepath.Join(lf.root, name+".keys"), filepath.Join(lf.root, name, "keys"))
	return lf.f.start(name, "", "node", "--name", name, "--nats", natsURL, "--nats-creds", creds, "--data", filepath.Join(lf.root, name),
		"--gossip-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "--join", lf.gossipIn)
}
