package fleet_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport/gossip"
)

// Liveness from two signals (issue 18 part 3): a killed agent's in-flight request
// fails within a second, and a CPU-starved but connected agent is never shown dead.

// TestFleetKilledNodeFailsFast: kill -9 of a node agent while a `run` of `sleep
// 30` is in flight: the request fails with `unavailable` within 1 s (the NATS
// server sees the agent's connection close; gossip alone took 3.3 s), and the
// node is then shown dead.
func TestFleetKilledNodeFailsFast(t *testing.T) {
	lf := startLoopbackFleet(t)
	a := lf.api
	p := lf.startNodeVia("k1", lf.natsURL)
	lf.f.eventually(30*time.Second, func() bool { return a.nodes()["k1"].Status == api.NodeAlive && a.serves("k1") }, "k1 alive and serving")
	lf.f.eventually(10*time.Second, a.twoSignals, "the controller's liveness uses the NATS connections")
	var s api.Session
	a.call(http.MethodPost, "/v1/sessions", map[string]string{"node": "k1"}, http.StatusCreated, &s)
	path := "/v1/sessions/k1/" + s.ID

	run := a.start(http.MethodPost, path+"/run", api.RunBody{Command: "sleep 30", TimeoutMS: 45000})
	lf.f.eventually(20*time.Second, func() bool {
		var got api.Session
		r := a.do(http.MethodGet, path, nil)
		return r.status == http.StatusOK && jsonDecode(r.body, &got) == nil && got.State == api.StateRunning && got.CurrentCommand == "sleep 30"
	}, "sleep 30 running on k1")

	killed := time.Now()
	lf.f.kill(p)
	run.failsFast(t, "run", killed)
	// A new request fails at once, and gossip confirms the death within seconds.
	r := a.do(http.MethodPost, path+"/run", api.RunBody{Command: "echo late", TimeoutMS: 5000})
	if e := r.apiErr(); r.status != http.StatusServiceUnavailable || e == nil || e.Code != api.CodeUnavailable || r.took > time.Second {
		t.Errorf("a run after the kill: %s in %v, want 503 unavailable at once", r, r.took)
	}
	lf.f.eventually(20*time.Second, func() bool { return a.nodes()["k1"].Status == api.NodeDead }, "k1 shown dead")
}

// TestFleetStarvedNodeNeverDead: a node agent limited to 1% of a CPU by a cgroup
// CPU quota (10 ms per second) for 10 s keeps serving requests and is never shown
// dead, disconnected or left (GET /v1/nodes polled every 100 ms). On loopback
// memberlist still gets its answers in time at 1% (it refutes a suspicion within
// its next slice), so this shows the requests; TestFleetStalledNodeNeverDead is the
// one where gossip declares the node dead.
func TestFleetStarvedNodeNeverDead(t *testing.T) {
	testutil.NeedRoot(t)
	cg := newCPUCgroup(t)
	lf := startLoopbackFleet(t)
	p, path := startWatchedNode(t, lf, "s1")
	cg.limit(t, p.cmd.Process.Pid, 10*time.Millisecond, time.Second)
	seen := watchStarved(t, lf, "s1", path, 10*time.Second, func() {})
	cg.release(t)
	t.Logf("statuses of s1 under a 1%% CPU quota, every 100 ms: %v", seen)
	lf.f.eventually(30*time.Second, func() bool { return lf.api.nodes()["s1"].Status == api.NodeAlive }, "s1 alive again")
	lf.api.call(http.MethodPost, path+"/run", api.RunBody{Command: "echo after", TimeoutMS: 15000}, http.StatusOK, nil)
}

// TestFleetStalledNodeNeverDead: a node agent that the scheduler leaves without a
// CPU for seconds at a time (stopped 3 s, then running 0.3 s, for 10 s: what a
// heavily loaded host does to it) is declared dead by gossip, which alone used to
// cancel its requests; its NATS connection stays up, so it is shown suspect, never
// dead, and requests made meanwhile succeed once it runs again.
func TestFleetStalledNodeNeverDead(t *testing.T) {
	lf := startLoopbackFleet(t)
	p, path := startWatchedNode(t, lf, "s2")
	pid := p.cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) }) // before the fleet stops
	stalled := true
	next := time.Now()
	seen := watchStarved(t, lf, "s2", path, 10*time.Second, func() {
		if time.Now().Before(next) {
			return
		}
		if stalled {
			syscall.Kill(pid, syscall.SIGSTOP)
			next = time.Now().Add(3 * time.Second)
		} else {
			syscall.Kill(pid, syscall.SIGCONT)
			next = time.Now().Add(300 * time.Millisecond)
		}
		stalled = !stalled
	})
	syscall.Kill(pid, syscall.SIGCONT)
	t.Logf("statuses of s2 stalled 3 s of every 3.3 s, every 100 ms: %v", seen)
	if seen[api.NodeSuspect] == 0 {
		t.Error("s2 was never suspect: gossip never doubted it, so this test showed nothing")
	}
	lf.f.eventually(30*time.Second, func() bool { return lf.api.nodes()["s2"].Status == api.NodeAlive }, "s2 alive again")
	lf.api.call(http.MethodPost, path+"/run", api.RunBody{Command: "echo after", TimeoutMS: 15000}, http.StatusOK, nil)
}

// startWatchedNode starts node name, waits until it serves with the NATS signal
// in use, and opens a session on it: its path.
func startWatchedNode(t *testing.T, lf *loopbackFleet, name string) (*proc, string) {
	t.Helper()
	a := lf.api
	p := lf.startNodeVia(name, lf.natsURL)
	lf.f.eventually(30*time.Second, func() bool { return a.nodes()[name].Status == api.NodeAlive && a.serves(name) }, "%s alive and serving", name)
	lf.f.eventually(10*time.Second, a.twoSignals, "the controller's liveness uses the NATS connections")
	var s api.Session
	a.call(http.MethodPost, "/v1/sessions", map[string]string{"node": name}, http.StatusCreated, &s)
	path := "/v1/sessions/" + name + "/" + s.ID
	a.call(http.MethodPost, path+"/run", api.RunBody{Command: "echo warm", TimeoutMS: 15000}, http.StatusOK, nil)
	return p, path
}

// watchStarved runs requests on the session at path one after the other for span,
// while it polls GET /v1/nodes every 100 ms (calling each first, which starves the
// node its own way): the node must never be shown dead, disconnected or left, and
// every request must succeed. It returns how often each status was seen.
func watchStarved(t *testing.T, lf *loopbackFleet, node, path string, span time.Duration, each func()) map[string]int {
	t.Helper()
	a := lf.api
	type result struct {
		n    int
		r    reply
		err  error
		took time.Duration
	}
	runs := make(chan result, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	begin := time.Now()
	each()
	go func() { // ends when span has passed (or ctx)
		defer close(runs)
		for n := 1; time.Since(begin) < span && ctx.Err() == nil; n++ {
			rctx, rcancel := context.WithTimeout(ctx, 40*time.Second)
			start := time.Now()
			r, err := a.send(rctx, http.MethodPost, path+"/run", api.RunBody{Command: fmt.Sprintf("echo starved-%d", n), TimeoutMS: 30000})
			rcancel()
			runs <- result{n, r, err, time.Since(start)}
		}
	}()
	seen := map[string]int{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(begin) < span {
		<-tick.C // sampling /v1/nodes, not waiting for anything
		each()
		n, ok := a.nodes()[node]
		if !ok {
			t.Fatalf("%s is no longer in GET /v1/nodes", node)
		}
		seen[n.Status]++
		switch n.Status {
		case api.NodeDead, api.NodeDisconnected, api.NodeLeft:
			t.Fatalf("%s shown %s %v into its starvation (seen so far: %v)", node, n.Status, time.Since(begin).Round(time.Millisecond), seen)
		}
	}
	done := 0
	for res := range runs {
		var br api.BlockResult
		if res.err != nil || res.r.status != http.StatusOK || jsonDecode(res.r.body, &br) != nil || br.Block.ExitCode == nil || *br.Block.ExitCode != 0 ||
			!strings.Contains(br.Text, fmt.Sprintf("starved-%d", res.n)) {
			t.Errorf("run %d while starved: %v %s (after %v)", res.n, res.err, res.r, res.took)
			continue
		}
		done++
		t.Logf("run %d while starved: ok in %v", res.n, res.took.Round(time.Millisecond))
	}
	if done == 0 {
		t.Error("no request completed while the node was starved")
	}
	return seen
}

// twoSignals reports whether the controller's node liveness uses the NATS signal
// beside gossip (its fleetmux_liveness_nats metric), as opposed to gossip alone.
func (c *apiClient) twoSignals() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.send(ctx, http.MethodGet, "/metrics", nil)
	return err == nil && r.status == http.StatusOK && strings.Contains("\n"+string(r.body), "\nfleetmux_liveness_nats 1\n")
}

// cpuCgroup is a cgroup with a CPU quota that a test moves a process into: cgroup
// v2 (cpu.max) where the unified hierarchy has the cpu controller, else v1
// (cpu.cfs_quota_us).
type cpuCgroup struct {
	dir    string // the test's cgroup
	parent string // where processes go back to
	v2     bool
	pid    int
}

func newCPUCgroup(t *testing.T) *cpuCgroup {
	t.Helper()
	name := "fleetmux-test-" + randomHex(4)
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(" "+string(b)+" ", " cpu ") {
		parent := "/sys/fs/cgroup"
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			testutil.Missing(t, "a cgroup v2 cpu controller for children: %v", err)
		}
		cg := &cpuCgroup{dir: filepath.Join(parent, name), parent: parent, v2: true}
		if err := os.Mkdir(cg.dir, 0o755); err != nil {
			testutil.Missing(t, "a cgroup of our own: %v", err)
		}
		t.Cleanup(func() { cg.release(t) })
		return cg
	}
	parent := "/sys/fs/cgroup/cpu"
	if _, err := os.Stat(filepath.Join(parent, "cpu.cfs_quota_us")); err != nil {
		testutil.Missing(t, "a cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us)")
	}
	cg := &cpuCgroup{dir: filepath.Join(parent, name), parent: parent}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		testutil.Missing(t, "a cgroup of our own: %v", err)
	}
	t.Cleanup(func() { cg.release(t) })
	return cg
}

// limit moves pid (all its threads) into the cgroup with quota of CPU time per period.
func (cg *cpuCgroup) limit(t *testing.T, pid int, quota, period time.Duration) {
	t.Helper()
	write := func(file, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(v), 0); err != nil {
			t.Fatalf("cgroup %s: %v", file, err)
		}
	}
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	if cg.v2 {
		write("cpu.max", us(quota)+" "+us(period))
	} else {
		write("cpu.cfs_period_us", us(period))
		write("cpu.cfs_quota_us", us(quota))
	}
	write("cgroup.procs", strconv.Itoa(pid))
	cg.pid = pid
	if !cg.holds(pid) {
		t.Fatalf("pid %d is not in %s after the move", pid, cg.dir)
	}
}

// holds reports whether pid is in the cgroup.
func (cg *cpuCgroup) holds(pid int) bool {
	f, err := os.Open(filepath.Join(cg.dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sc.Text() == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// release moves every process of the cgroup back and removes it (idempotent).
func (cg *cpuCgroup) release(t *testing.T) {
	t.Helper()
	if cg.dir == "" {
		return
	}
	if b, err := os.ReadFile(filepath.Join(cg.dir, "cgroup.procs")); err == nil {
		for _, pid := range strings.Fields(string(b)) {
			if err := os.WriteFile(filepath.Join(cg.parent, "cgroup.procs"), []byte(pid), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Logf("move %s out of %s: %v", pid, cg.dir, err)
			}
		}
	}
	if err := os.Remove(cg.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("remove %s: %v", cg.dir, err)
	}
	cg.dir = ""
}

// TestFleetFakeGossipMemberNeverAlive performs the attack of README's "one gossip
// key for the fleet": a process with the fleet's gossip key (any node host has
// it) but no node's NATS credentials gossips a node "a-fake" with no sessions. The
// controller lists it disconnected, never alive, never picks it for a new session
// (by gossip alone it would win the pick: fewest sessions, first by name) and
// refuses requests to it at once.
func TestFleetFakeGossipMemberNeverAlive(t *testing.T) {
	lf := startLoopbackFleet(t)
	a := lf.api
	lf.startNodeVia("n1", lf.natsURL)
	lf.f.eventually(30*time.Second, func() bool { return a.nodes()["n1"].Status == api.NodeAlive && a.serves("n1") }, "n1 alive and serving")
	lf.f.eventually(10*time.Second, a.twoSignals, "the controller's liveness uses the NATS connections")

	key, err := gossip.ReadKey(gossip.KeyPath(filepath.Join(lf.root, "ctl")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fake, err := gossip.Start(ctx, gossip.Config{Name: "a-fake", SecretKey: key, Join: []string{lf.gossipIn},
		Meta: api.NodeMeta{Name: "a-fake", Version: "dev", Proto: api.ProtocolVersion}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	lf.f.eventually(20*time.Second, func() bool { _, ok := a.nodes()["a-fake"]; return ok }, "the fake member reached the controller's table")
	if st := a.nodes()["a-fake"].Status; st != api.NodeDisconnected {
		t.Errorf("fake member listed %s, want %s", st, api.NodeDisconnected)
	}
	for range 3 {
		var s api.Session
		a.call(http.MethodPost, "/v1/sessions", map[string]string{}, http.StatusCreated, &s)
		if s.Node != "n1" {
			t.Fatalf("a new session went to %s", s.Node)
		}
	}
	r := a.do(http.MethodPost, "/v1/sessions", map[string]string{"node": "a-fake"})
	if e := r.apiErr(); r.status != http.StatusServiceUnavailable || e == nil || e.Code != api.CodeUnavailable {
		t.Errorf("create on the fake member: %s, want 503 unavailable", r)
	}
}
