package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// maxFailureWindow is the longest a client may see requests fail because one part
// of the fleet (a NATS server, a controller) died.
const maxFailureWindow = 2 * time.Second

// TestFleetNATSCluster is a fleet on the operator's own NATS: three real
// nats-server processes (built from the pinned module), routed, JetStream on,
// trusting the fleet through the fragment `enroll --print-jwt` prints, with a
// certificate from the fleet's CA; two controllers and three nodes (in network
// namespaces of their own as root), every process given all three servers. While
// a client runs commands through both controllers (moving to the other when one
// does not answer at all, as a client with both addresses or a load balancer
// does) and a subscriber pulls a session's output from FLEETMUX_OUT, it kills -9
// each NATS server in turn (restarting it, and waiting until JetStream is current
// again, before the next), then each controller in turn, then a controller while
// a NATS server is down. Each failure may cost the client at most
// maxFailureWindow of failed requests; `token create` and `policy set` succeed
// through both controllers with any one server down; the controller restarted
// while a server is down serves within 5 s; and a replay of FLEETMUX_OUT, its
// gaps filled by offset, is the session's output with every line once.
//
// It uses fixed ports (so restarted processes come back on the same addresses):
// not parallel.
func TestFleetNATSCluster(t *testing.T) {
	started := time.Now()
	root := t.TempDir()
	names := []string{"n1", "n2", "n3"}
	nw := setupNetwork(t, names)
	f := newFleet(t, root, nw)

	auth := filepath.Join(root, "auth")
	f.run("controller", "init", "--data", auth)
	if err := os.MkdirAll(filepath.Join(root, "creds"), 0o700); err != nil {
		t.Fatal(err)
	}
	enroll := func(kind, name string, extra ...string) (file, out string) {
		file = filepath.Join(root, "creds", kind+"-"+name+".creds")
		out = f.run(append([]string{"enroll", kind, name, "--data", auth, "--out", file}, extra...)...)
		if kind != "subscriber" {
			installKeys(t, strings.TrimSuffix(file, ".creds")+".keys", filepath.Join(root, name, "keys"))
		}
		return file, out
	}
	subCreds, printed := enroll("subscriber", "dash", "--print-jwt")
	certFile, keyFile := serverCert(t, auth, root, nw.hostIP, "127.0.0.1")
	cl := startNATSCluster(t, f, nw.hostIP, trustFragment(t, printed), certFile, keyFile, 3)
	urls := cl.urls()
	gossipKey := filepath.Join(auth, "keys", "gossip.key")

	// Two controllers, each the other's gossip seed, on fixed addresses.
	ctlNames := []string{"ctl-a", "ctl-b"}
	hostPorts := freePorts(t, nw.hostIP, 2)
	httpPorts := freePorts(t, "127.0.0.1", 2)
	gossipOf := map[string]string{}
	httpOf := map[string]string{}
	ctlCreds := map[string]string{}
	for i, c := range ctlNames {
		gossipOf[c] = net.JoinHostPort(nw.hostIP, strconv.Itoa(hostPorts[i]))
		httpOf[c] = net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPorts[i]))
		ctlCreds[c], _ = enroll("controller", c)
	}
	ctlArgs := func(c string) []string {
		other := ctlNames[0]
		if c == other {
			other = ctlNames[1]
		}
		return []string{"controller", "--name", c, "--data", filepath.Join(root, c), "--nats", urls, "--nats-creds", ctlCreds[c],
			"--http-listen", httpOf[c], "--gossip-listen", gossipOf[c], "--gossip-key-file", gossipKey, "--join", gossipOf[other]}
	}
	ctls := map[string]*proc{}
	for _, c := range ctlNames {
		ctls[c] = f.start(c, "", ctlArgs(c)...)
	}
	nodeGossip := map[string]string{}
	if nw.netns {
		for _, n := range names {
			nodeGossip[n] = net.JoinHostPort(nw.nodeIP[n], "7946")
		}
	} else {
		for i, p := range freePorts(t, "127.0.0.1", len(names)) {
			nodeGossip[names[i]] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		}
	}
	for _, n := range names {
		creds, _ := enroll("node", n)
		f.start(n, nw.nodeNS[n], "node", "--name", n, "--nats", urls, "--nats-creds", creds, "--data", filepath.Join(root, n),
			"--gossip-listen", nodeGossip[n], "--gossip-key-file", gossipKey, "--join", gossipOf["ctl-a"]+","+gossipOf["ctl-b"])
	}
	admin := map[string]*apiClient{}
	for _, c := range ctlNames {
		if got := f.waitHTTPAPI(ctls[c], 30*time.Second); got != "http://"+httpOf[c] {
			t.Fatalf("%s serves on %s, want http://%s", c, got, httpOf[c])
		}
		admin[c] = &apiClient{f: f, base: "http://" + httpOf[c]}
	}
	for _, c := range ctlNames {
		f.eventually(30*time.Second, paced(100*time.Millisecond, func() bool { return servesAll(admin[c], names) }), "%s lists and reaches n1, n2, n3", c)
	}

	// The client works with a token of its own, kept in FLEETMUX_TOKENS (a KV read
	// on every controller that has not seen it yet).
	var tok api.NewToken
	admin["ctl-a"].call(http.MethodPost, "/v1/tokens", api.TokenRequest{Name: "client", Role: api.RoleOperator}, http.StatusOK, &tok)
	client := map[string]*apiClient{}
	for _, c := range ctlNames {
		client[c] = &apiClient{f: f, base: admin[c].base, token: tok.Secret}
	}
	sessions := map[string]string{}
	for _, n := range names {
		var s api.Session
		client["ctl-a"].call(http.MethodPost, "/v1/sessions", map[string]string{"node": n}, http.StatusCreated, &s)
		sessions[n] = s.ID
	}
	// A session of its own for the checks that a restarted controller serves.
	var probe api.Session
	client["ctl-a"].call(http.MethodPost, "/v1/sessions", map[string]string{"node": names[0]}, http.StatusCreated, &probe)
	// The output a subscriber follows: numbered lines until the stop file appears.
	stopFile := filepath.Join(root, "stop-loop")
	var loopSess api.Session
	client["ctl-b"].call(http.MethodPost, "/v1/sessions", map[string]string{"node": "n1"}, http.StatusCreated, &loopSess)
	loop := "i=0; until [ -e " + stopFile + " ]; do i=$((i+1)); echo line-$i; sleep 0.02; done"
	var br api.BlockResult
	client["ctl-b"].call(http.MethodPost, "/v1/sessions/n1/"+loopSess.ID+"/run", api.RunBody{Command: loop, TimeoutMS: 200}, http.StatusOK, &br)
	policy := `{"version": 1, "rules": [{"name": "no-wipes", "match": {"command": "rm -rf /"}, "action": "deny"}, {"name": "default", "action": "allow"}]}`
	sub := startOutSubscriber(t, cl, subCreds, "dash", "fleetmux.out.n1."+loopSess.ID)
	t.Logf("setup: %v (netns: %v, NATS %s)", time.Since(started).Round(time.Millisecond), nw.netns, urls)

	// The policy the phases set again and again, in place before the client starts
	// (the first policy a node gets changes how its guard judges lines typed in
	// its sessions).
	admin["ctl-a"].call(http.MethodPut, "/v1/policy", policy, http.StatusOK, nil)
	wl := startWorkload(client, ctlNames, names, sessions)
	defer wl.stop()
	f.eventually(10*time.Second, func() bool { return wl.okSince(time.Now().Add(-time.Hour)) >= 10 }, "the client's first commands succeed")

	// writes checks that token create and policy set succeed through both
	// controllers (each tried until it does, at most 30 s: JetStream elects new
	// leaders for what the dead server led, 4-13 s here), and logs how long after
	// the failure they first did.
	writes := func(t *testing.T, tag string, since time.Time) {
		for _, c := range ctlNames {
			var last lastSeen
			f.eventually(30*time.Second, paced(100*time.Millisecond, func() bool {
				r := admin[c].do(http.MethodPost, "/v1/tokens", api.TokenRequest{Name: tag + "-" + c, Role: api.RoleViewer})
				last.s = r.String()
				// exists: an earlier try was written though its answer was lost.
				return r.status == http.StatusOK || r.status == http.StatusConflict
			}), "token create through %s (last: %v)", c, &last)
			tokenAt := time.Since(since)
			f.eventually(30*time.Second, paced(100*time.Millisecond, func() bool {
				r := admin[c].do(http.MethodPut, "/v1/policy", policy)
				last.s = r.String()
				return r.status == http.StatusOK
			}), "policy set through %s (last: %v)", c, &last)
			t.Logf("%s: token create through %s succeeded %v after the failure, policy set %v", tag, c,
				tokenAt.Round(time.Millisecond), time.Since(since).Round(time.Millisecond))
		}
	}
	// settled waits until the client's commands succeed again after a failure.
	settled := func(since time.Time) {
		f.eventually(20*time.Second, func() bool { return wl.okSince(since) >= 5 }, "the client's commands succeed again")
	}
	// restartCtl restarts a controller and returns how long until it ran a command
	// for the client (with the client's stored token) and until it listed every node.
	restartCtl := func(c string) (serves, lists time.Duration) {
		began := time.Now()
		ctls[c] = f.start(c, "", ctlArgs(c)...)
		f.eventually(30*time.Second, paced(20*time.Millisecond, func() bool {
			if serves == 0 && client[c].runs(names[0], probe.ID) {
				serves = time.Since(began)
			}
			if lists == 0 && allListed(client[c], names) {
				lists = time.Since(began)
			}
			return serves > 0 && lists > 0
		}), "restarted %s runs a command and lists every node", c)
		return serves, lists
	}

	var phases []phase
	mark := func(name string) time.Time {
		at := time.Now()
		phases = append(phases, phase{name: name, at: at})
		return at
	}
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

	for i := range cl.servers {
		s := cl.servers[i]
		step("kill-"+s.name, func(t *testing.T) {
			t.Logf("%s leads FLEETMUX_OUT", sub.leader())
			killed := mark("kill -9 " + s.name)
			f.kill(s.p)
			settled(killed)
			writes(t, "without-"+s.name, killed)
			cl.start(i)
			for j := range cl.servers {
				cl.waitHealthy(j, 60*time.Second)
			}
			t.Logf("%s back and JetStream current %v after its kill", s.name, time.Since(killed).Round(time.Millisecond))
		})
	}
	for _, c := range ctlNames {
		step("kill-"+c, func(t *testing.T) {
			killed := mark("kill -9 " + c)
			f.kill(ctls[c])
			settled(killed)
			serves, lists := restartCtl(c)
			t.Logf("%s restarted: runs commands %v after its start, lists every node after %v", c,
				serves.Round(time.Millisecond), lists.Round(time.Millisecond))
		})
	}
	step("restart-ctl-a-without-ns1", func(t *testing.T) {
		t.Logf("%s leads FLEETMUX_OUT", sub.leader())
		killed := mark("kill -9 ns1 (again)")
		f.kill(cl.servers[0].p)
		settled(killed)
		writes(t, "again-without-ns1", killed)
		mark("kill -9 ctl-a while ns1 is down")
		f.kill(ctls["ctl-a"])
		serves, lists := restartCtl("ctl-a")
		t.Logf("ctl-a restarted while ns1 is down: runs commands %v after its start, lists every node after %v",
			serves.Round(time.Millisecond), lists.Round(time.Millisecond))
		if serves > 5*time.Second {
			t.Errorf("ctl-a, restarted while ns1 is down, ran a command %v after its start, want within 5s", serves)
		}
		writes(t, "restarted-without-ns1", time.Now())
		cl.start(0)
		for j := range cl.servers {
			cl.waitHealthy(j, 60*time.Second)
		}
	})
	mark("end")
	wl.stop()

	step("failure-windows", func(t *testing.T) {
		for k, p := range phases[:len(phases)-1] {
			w := wl.window(p.at, phases[k+1].at)
			t.Logf("%-45s %4d requests, %3d failed, failure window %v%s", p.name+":", w.ops, w.failed, w.span.Round(time.Millisecond), w.first)
			if w.span > maxFailureWindow {
				t.Errorf("%s: requests failed for %v (%d of %d), want at most %v", p.name, w.span, w.failed, w.ops, maxFailureWindow)
			}
		}
		t.Logf("the client moved to the other controller %d times", wl.failovers())
	})

	step("no-output-lost", func(t *testing.T) {
		if err := os.WriteFile(stopFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		c := admin["ctl-a"]
		if w := c.waitIdle("n1", loopSess.ID); !w.OK {
			t.Fatalf("the loop did not end: %+v", w.Session)
		}
		raw := c.rawOutput("n1", loopSess.ID)
		live := sub.stop()
		replay := sub.replay(t, int64(len(raw)))
		got, gaps := replay.assemble(loopSess.ID, raw)
		_, liveGaps := live.assemble(loopSess.ID, raw)
		missing := int64(len(raw)) - replay.bytes(loopSess.ID)
		t.Logf("output: %d bytes; the replay of FLEETMUX_OUT holds %d of them (%d gaps, %d bytes filled by offset from the node); the live pull had %d gaps",
			len(raw), len(raw)-int(missing), gaps, missing, liveGaps)
		for _, g := range replay.gaps(loopSess.ID, int64(len(raw))) {
			t.Logf("missing from FLEETMUX_OUT: %s", g)
		}
		if string(got) != string(raw) {
			t.Fatalf("the replay of FLEETMUX_OUT, gaps filled, is not the session's output (%d and %d bytes)", len(got), len(raw))
		}
		if rep := replay.repeated[loopSess.ID]; rep > 0 {
			t.Errorf("the replay holds %d bytes twice", rep)
		}
		// A chunk in flight when its server died may be lost to the stream (the node
		// publishes without waiting for the server); at most one per NATS failure.
		if gaps > 4 {
			t.Errorf("the replay of FLEETMUX_OUT has %d gaps over 4 NATS server deaths", gaps)
		}
		var seen []int
		for _, m := range regexp.MustCompile(`line-(\d+)\r?\n`).FindAllSubmatch(got, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			seen = append(seen, n)
		}
		for i, n := range seen {
			if n != i+1 {
				t.Fatalf("line %d of the output is line-%d; want every line once, in order (%d lines)", i+1, n, len(seen))
			}
		}
		if len(seen) < 500 {
			t.Errorf("only %d lines printed over the test", len(seen))
		}
	})
	t.Logf("total %v", time.Since(started).Round(time.Millisecond))
}

// servesAll reports whether the controller lists every node alive and reaches each.
func servesAll(c *apiClient, nodes []string) bool {
	if !allListed(c, nodes) {
		return false
	}
	for _, n := range nodes {
		if !c.serves(n) {
			return false
		}
	}
	return true
}

// allListed reports whether the controller lists every node alive.
func allListed(c *apiClient, nodes []string) bool {
	got := c.nodes()
	for _, n := range nodes {
		if got[n].Status != api.NodeAlive {
			return false
		}
	}
	return true
}

// runs reports whether a command runs through the controller, in session id of
// node, with the client's token.
func (c *apiClient) runs(node, id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	r, err := c.send(ctx, http.MethodPost, "/v1/sessions/"+node+"/"+id+"/run", api.RunBody{Command: "echo up", TimeoutMS: 2000})
	var br api.BlockResult
	return err == nil && r.status == http.StatusOK && json.Unmarshal(r.body, &br) == nil && strings.TrimSpace(br.Text) == "up"
}

// phase is a stretch of the test that begins with a failure.
type phase struct {
	name string
	at   time.Time
}

// op is one command of the workload.
type op struct {
	start, end time.Time
	ok         bool
	failover   bool   // the first controller did not answer; the other was asked
	err        string // why it failed
}

// workload runs commands (echo) through both controllers in turn, on every node,
// 20 a second, until stopped; a command whose controller does not answer at all
// (refused, reset) is sent to the other controller with the same idempotency key.
type workload struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	ops    []op
}

func startWorkload(clients map[string]*apiClient, ctls, nodes []string, sessions map[string]string) *workload {
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{cancel: cancel, done: make(chan struct{})}
	go func() { // owned by w: stop ends it
		defer close(w.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			node := nodes[i%len(nodes)]
			order := []string{ctls[i%2], ctls[1-i%2]}
			want := fmt.Sprintf("w-%d", i)
			body := api.RunBody{Command: "echo " + want, TimeoutMS: 4000, IdempotencyKey: fmt.Sprintf("wl-%d", i)}
			o := op{start: time.Now()}
			for k, c := range order {
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				r, err := clients[c].send(rctx, http.MethodPost, "/v1/sessions/"+node+"/"+sessions[node]+"/run", body)
				rcancel()
				if err != nil && k == 0 && ctx.Err() == nil {
					o.failover = true
					continue
				}
				var br api.BlockResult
				switch {
				case err != nil:
					o.err = fmt.Sprintf("%s: %v", c, err)
				case r.status != http.StatusOK || json.Unmarshal(r.body, &br) != nil:
					o.err = fmt.Sprintf("%s: %s", c, r)
				case strings.TrimSpace(br.Text) != want:
					o.err = fmt.Sprintf("%s: output %q, want %q", c, br.Text, want)
				default:
					o.ok = true
				}
				break
			}
			o.end = time.Now()
			if ctx.Err() != nil && !o.ok {
				return // cut short by stop: not a failure
			}
			w.mu.Lock()
			w.ops = append(w.ops, o)
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-tick.C: // the pace of the workload, not synchronisation
			}
		}
	}()
	return w
}

func (w *workload) stop() {
	w.once.Do(func() {
		w.cancel()
		<-w.done
	})
}

// okSince counts the commands that began after since and succeeded.
func (w *workload) okSince(since time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, o := range w.ops {
		if o.ok && o.start.After(since) {
			n++
		}
	}
	return n
}

func (w *workload) failovers() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, o := range w.ops {
		if o.failover {
			n++
		}
	}
	return n
}

// windowStats is what the client saw of one phase.
type windowStats struct {
	ops, failed int
	span        time.Duration // from the start of the first failed command to the end of the last
	first       string        // the first failure, for the log
}

// window is what the client saw of the commands that ended in [from, to).
func (w *workload) window(from, to time.Time) windowStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	var s windowStats
	var first, last time.Time
	for _, o := range w.ops {
		if o.end.Before(from) || !o.end.Before(to) {
			continue
		}
		s.ops++
		if o.ok {
			continue
		}
		s.failed++
		if first.IsZero() {
			first = o.start
			s.first = "; first: " + o.err
		}
		last = o.end
	}
	if s.failed > 0 {
		s.span = last.Sub(first)
	}
	return s
}

// outSubscriber is a subscriber of the fleet pulling one session's output from
// FLEETMUX_OUT through the consumer a controller made for it, on a connection
// given every server of the cluster.
type outSubscriber struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	name    string
	subject string
	live    *outCollector
	cancel  context.CancelFunc
	done    chan struct{}
}

func newCollector() *outCollector {
	return &outCollector{chunks: map[string]map[int64][]byte{}, repeated: map[string]int64{}, times: map[string]map[int64]string{}}
}

// gaps describes the ranges of session id's output [0, end) the collector lacks,
// with the publishing times of the chunks around each.
func (c *outCollector) gaps(id string, end int64) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	offs := make([]int64, 0, len(c.chunks[id]))
	for o := range c.chunks[id] {
		offs = append(offs, o)
	}
	slices.Sort(offs)
	var out []string
	pos, before := int64(0), "the start"
	for _, o := range offs {
		if o > pos {
			out = append(out, fmt.Sprintf("[%d, %d) between chunks published at %s and %s", pos, o, before, c.times[id][o]))
		}
		pos = max(pos, o+int64(len(c.chunks[id][o])))
		before = c.times[id][o]
	}
	if pos < end {
		out = append(out, fmt.Sprintf("[%d, %d) after the chunk published at %s", pos, end, before))
	}
	return out
}

// bytes is how many bytes of session id's output the collector holds.
func (c *outCollector) bytes(id string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, d := range c.chunks[id] {
		n += int64(len(d))
	}
	return n
}

func startOutSubscriber(t *testing.T, cl *natsCluster, creds, name, subject string) *outSubscriber {
	t.Helper()
	nc, err := nats.Connect(cl.urls(), nats.UserCredentials(creds), nats.RootCAs(creds), nats.CustomInboxPrefix("_INBOX.subscriber."+name),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("subscriber: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := &outSubscriber{nc: nc, js: js, name: name, subject: subject, live: newCollector(), done: make(chan struct{})}
	cons := s.consumer(t)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { // owned by s: stop ends it
		defer close(s.done)
		for ctx.Err() == nil {
			s.pull(cons, s.live, 500*time.Millisecond) // errors (a server died) are retried
		}
	}()
	return s
}

// consumer asks a controller for the subscriber's consumer on the subject, from
// the stream's start, and binds to it.
func (s *outSubscriber) consumer(t *testing.T) jetstream.Consumer {
	t.Helper()
	var cons jetstream.Consumer
	var last lastSeen
	testutil.Eventually(t, 30*time.Second, paced(100*time.Millisecond, func() bool {
		_, err := s.nc.Request("fleetmux.consumer."+api.StreamOut+"."+s.name+"."+s.subject, []byte(`{"ack_policy":"none"}`), 5*time.Second)
		if err != nil {
			last.s = err.Error()
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if cons, err = s.js.Consumer(ctx, api.StreamOut, s.name); err != nil {
			last.s = err.Error()
		}
		return err == nil
	}), "the subscriber's consumer on %s (last: %v)", api.StreamOut, &last)
	return cons
}

// pull fetches one batch into c and reports how many messages it held.
func (s *outSubscriber) pull(cons jetstream.Consumer, c *outCollector, wait time.Duration) int {
	batch, err := cons.Fetch(256, jetstream.FetchMaxWait(wait))
	if err != nil {
		return 0
	}
	n := 0
	for m := range batch.Messages() {
		c.take(&nats.Msg{Subject: m.Subject(), Header: nats.Header(m.Headers()), Data: m.Data()})
		n++
	}
	return n
}

// leader is the server that leads FLEETMUX_OUT now, for the log.
func (s *outSubscriber) leader() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, api.StreamOut)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return fmt.Sprintf("(no cluster info: %v)", err)
	}
	return info.Cluster.Leader
}

// stop ends the live pull and returns what it collected.
func (s *outSubscriber) stop() *outCollector {
	s.cancel()
	<-s.done
	return s.live
}

// replay deletes the subscriber's consumer, asks for it again from the stream's
// start, and pulls until it holds want bytes or nothing more comes.
func (s *outSubscriber) replay(t *testing.T, want int64) *outCollector {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.js.DeleteConsumer(ctx, api.StreamOut, s.name); err != nil {
		t.Fatalf("delete the subscriber's consumer: %v", err)
	}
	cons := s.consumer(t)
	c := newCollector()
	id := s.subject[strings.LastIndexByte(s.subject, '.')+1:]
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if s.pull(cons, c, time.Second) == 0 {
			ictx, icancel := context.WithTimeout(context.Background(), 5*time.Second)
			info, err := cons.Info(ictx)
			icancel()
			if err == nil && info.NumPending == 0 {
				break
			}
		}
		if c.bytes(id) >= want {
			break
		}
	}
	return c
}

// paced wraps a condition that sends requests so that a poll (Eventually polls
// every few milliseconds) asks at most once every d.
func paced(d time.Duration, cond func() bool) func() bool {
	var last time.Time
	return func() bool {
		if time.Since(last) < d {
			return false
		}
		last = time.Now()
		return cond()
	}
}

// lastSeen is the last answer a poll saw, for its failure message.
type lastSeen struct{ s string }

func (l *lastSeen) String() string { return l.s }
