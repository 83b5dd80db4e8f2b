package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// The load benchmark: a fleet of separate processes on loopback, as an operator
// runs it: a controller embedding NATS (JetStream on), a second controller serving
// the HTTP API, two node agents (each with its holder when the build has one), and
// K clients that each run `echo load-N` R times in a bash session of their own, as
// fast as the replies come. A build with the trust features (`fleetmux enroll`)
// runs with them all on: enrolled NATS users over TLS, signed requests, and the
// 50-rule guardPolicy in force on both nodes; an older build runs as it could.
//
// FLEETMUX_BENCH_OLD=DIR (a source tree, e.g. a git worktree of an older commit)
// or FLEETMUX_BENCH_OLD_BIN=FILE (a fleetmux binary) is the baseline; this tree and
// it run alternately, FLEETMUX_BENCH_LOAD_PAIRS times, and the report prints both
// side by side: runs/s, p50, p99, the CPU of each process per run, and the memory
// (PSS of every fleetmux process) per idle session.

// loadBuild is one fleetmux binary under test.
type loadBuild struct {
	name, bin string
	trust     bool // has controller init / enroll: TLS, signing, policy
}

// loadResult is one load run of one build.
type loadResult struct {
	build       string
	runs        int
	wall        time.Duration
	lat         []time.Duration
	cpu         map[string]time.Duration // by role, over the load
	pssPer      int64                    // KiB per idle session, all fleetmux processes
	idle        int
	pssByRole   map[string]int64 // KiB per idle session, by role
	errs        int
	firstErrMsg string
}

func (r loadResult) rate() float64 { return float64(r.runs) / r.wall.Seconds() }

// cpuPerRun is the CPU of every process of the fleet, shells included, per run.
func (r loadResult) cpuPerRun() float64 {
	var all time.Duration
	for _, d := range r.cpu {
		all += d
	}
	return float64(all) / float64(max(r.runs, 1))
}

// fleetProc is one process of the fleet.
type fleetProc struct {
	role string
	cmd  *exec.Cmd
	out  *testutil.Buffer
}

// loadFleet is a running fleet of one build.
type loadFleet struct {
	b     loadBuild
	dir   string
	api   string // http://127.0.0.1:PORT of the API controller
	token string
	procs []*fleetProc
	http  *http.Client
	env   []string
	// stopped: stop ran
	stopped bool
}

func mustPort(t *testing.T) string {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// fm runs a short fleetmux command of the build (init, enroll) to its end.
func (f *loadFleet) fm(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(f.b.bin, args...)
	cmd.Env = f.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fleetmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// start starts a long-running process of the fleet.
func (f *loadFleet) start(t *testing.T, role string, args ...string) {
	t.Helper()
	p := &fleetProc{role: role, out: &testutil.Buffer{Tail: 16 << 10}}
	p.cmd = exec.Command(f.b.bin, args...)
	p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = f.env, p.out, p.out
	p.cmd.Dir = f.dir
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.procs = append(f.procs, p)
}

// startLoadFleet starts the fleet of b in a new directory.
//
// Its directory is not a t.TempDir: the sessions' shells, ended with their holder,
// write their history into HOME after the test's own cleanup would have run.
func startLoadFleet(t *testing.T, b loadBuild) *loadFleet {
	t.Helper()
	dir, err := os.MkdirTemp("", "fleetmux-load-")
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	f := &loadFleet{b: b, dir: dir, token: "bench-load-token-0123456789abcdef"}
	f.env = append(os.Environ(), "HOME="+home, "FLEETMUX_TOKEN="+f.token, "GOTOOLCHAIN=local")
	natsAddr, g1, g2 := mustPort(t), mustPort(t), mustPort(t)
	h1, h2 := mustPort(t), mustPort(t)
	ctl := filepath.Join(dir, "ctl")
	common := []string{"--ssh-listen", "off"}
	if b.trust {
		f.fm(t, "controller", "init", "--data", ctl)
		for _, n := range []string{"n1", "n2"} {
			f.fm(t, "enroll", "node", n, "--data", ctl, "--out", filepath.Join(dir, n+".creds"))
		}
		f.fm(t, "enroll", "controller", "ctl-2", "--data", ctl, "--out", filepath.Join(dir, "ctl-2.creds"))
	}
	f.start(t, "ctl-nats", append([]string{"controller", "--name", "ctl-1", "--data", ctl, "--nats-listen", natsAddr,
		"--http-listen", h1, "--gossip-listen", g1}, common...)...)
	url := "nats://" + natsAddr
	args := []string{"controller", "--name", "ctl-2", "--data", filepath.Join(dir, "ctl-2"), "--nats", url,
		"--http-listen", h2, "--gossip-listen", g2, "--join", g1}
	if b.trust {
		k := filepath.Join(dir, "ctl-2.keys")
		args = append(args, "--nats-creds", filepath.Join(dir, "ctl-2.creds"), "--signing-key", filepath.Join(k, "controller.key"),
			"--signing-cert", filepath.Join(k, "controller.cert"), "--gossip-key-file", filepath.Join(k, "gossip.key"))
	}
	f.start(t, "ctl-api", append(args, common...)...)
	for _, n := range []string{"n1", "n2"} {
		args := []string{"node", "--name", n, "--data", filepath.Join(dir, n), "--nats", url,
			"--gossip-listen", mustPort(t), "--join", g1}
		if b.trust {
			k := filepath.Join(dir, n+".keys")
			args = append(args, "--nats-creds", filepath.Join(dir, n+".creds"), "--trust-root", filepath.Join(k, "fleet.pub"),
				"--gossip-key-file", filepath.Join(k, "gossip.key"))
		}
		f.start(t, "node", args...)
	}
	t.Cleanup(func() {
		f.stop()
		// The shells go with their holder, a moment after it.
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // best effort, not synchronisation
		}
	})
	f.api = "http://" + h2
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	f.http = &http.Client{Transport: tr, Timeout: time.Minute}
	// Both nodes alive in the API controller's table.
	deadline := time.Now().Add(60 * time.Second)
	for {
		type nodeState struct {
			Name  string `json:"name"`
			State string `json:"status"`
		}
		var raw json.RawMessage
		var nodes []nodeState
		err := f.do("GET", "/v1/nodes", nil, "", &raw)
		if err == nil && json.Unmarshal(raw, &nodes) != nil { // {"nodes": [...]} since the list became an object
			var l struct{ Nodes []nodeState }
			err = json.Unmarshal(raw, &l)
			nodes = l.Nodes
		}
		alive := 0
		for _, n := range nodes {
			if n.State == "alive" {
				alive++
			}
		}
		if err == nil && alive == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: nodes not alive after 60 s (%v, %+v)\n%s", b.name, err, nodes, f.logs())
		}
		time.Sleep(100 * time.Millisecond) // polling the API, not synchronisation
	}
	return f
}

func (f *loadFleet) logs() string {
	var s strings.Builder
	for _, p := range f.procs {
		fmt.Fprintf(&s, "--- %s %v\n%s\n", p.role, p.cmd.Args[1:], p.out.String())
	}
	return s.String()
}

// pids are the fleet's processes by role, holders included (found by executable).
func (f *loadFleet) pids() map[int]string {
	out := map[int]string{}
	for _, p := range f.procs {
		out[p.cmd.Process.Pid] = p.role
	}
	for _, pid := range procsOf(f.b.bin) {
		if _, ok := out[pid]; !ok && roleOf(pid) == "holder" {
			out[pid] = "holder"
		}
	}
	return out
}

// stop ends every process of the fleet: the agents and controllers, then the
// holders they left (a holder outlives its agent by design).
func (f *loadFleet) stop() {
	if f.stopped {
		return
	}
	f.stopped = true
	holders := f.pids()
	for _, p := range f.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range f.procs {
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
	for pid, role := range holders {
		if role == "holder" {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// do sends one API request; out gets the JSON reply. ctype, when set, is the
// body's content type (else JSON).
func (f *loadFleet) do(method, path string, body any, ctype string, out any) error {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return err
		}
		rd, ctype = bytes.NewReader(data), "application/json"
	}
	req, err := http.NewRequest(method, f.api+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := f.http.Do(req)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (f *loadFleet) newSession(node string) (string, error) {
	var s struct{ Node, ID string }
	if err := f.do("POST", "/v1/sessions", map[string]any{"node": node}, "", &s); err != nil {
		return "", err
	}
	return s.Node + "/" + s.ID, nil
}

// run runs command in the session addr and checks it finished with exit 0 and
// want in its output.
func (f *loadFleet) run(addr, command, want string) error {
	var r struct {
		Block struct {
			State    string `json:"state"`
			ExitCode *int   `json:"exit_code"`
		} `json:"block"`
		Text string `json:"text"`
	}
	if err := f.do("POST", "/v1/sessions/"+addr+"/run", map[string]any{"command": command, "timeout_ms": 30000}, "", &r); err != nil {
		return err
	}
	if r.Block.State != "done" || r.Block.ExitCode == nil || *r.Block.ExitCode != 0 || !strings.Contains(r.Text, want) {
		return fmt.Errorf("run %q on %s: block %s, exit %v, text %q", command, addr, r.Block.State, r.Block.ExitCode, r.Text)
	}
	return nil
}

// sessions creates n sessions alternately on n1 and n2 (8 at a time) and waits
// for each one's first prompt (a run of `true`).
func (f *loadFleet) sessions(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			a, err := f.newSession(fmt.Sprintf("n%d", i%2+1))
			// A node gossiped alive may not serve on the bus yet.
			for deadline := time.Now().Add(20 * time.Second); err != nil && strings.Contains(err.Error(), "unavailable") && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond) // polling the node, not synchronisation
				a, err = f.newSession(fmt.Sprintf("n%d", i%2+1))
			}
			if err == nil {
				err = f.run(a, "true", "")
			}
			addrs[i], errs[i] = a, err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v\n%s", f.b.name, err, f.logs())
		}
	}
	return addrs
}

// policyInForce sets guardPolicy and waits until both nodes deny by it.
func (f *loadFleet) policyInForce(t *testing.T, addrs []string) {
	t.Helper()
	if err := f.do("PUT", "/v1/policy", []byte(guardPolicy()), "application/yaml", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs[:2] {
		for {
			err := f.run(a, "tool0 --force", "")
			if err != nil && strings.Contains(err.Error(), "no-tool-0") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: policy not in force on %s: %v", f.b.name, a, err)
			}
			time.Sleep(50 * time.Millisecond) // polling the node, not synchronisation
		}
	}
}

// cpuOf is the user+system CPU time of pid so far.
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fs) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(fs[11], 10, 64)
	k, _ := strconv.ParseInt(fs[12], 10, 64)
	return time.Duration(u+k) * time.Second / 100 // USER_HZ
}

// childrenOf are the pids whose parent is in parents (the sessions' shells).
func childrenOf(parents map[int]string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fs) > 2 {
			if pp, _ := strconv.Atoi(fs[1]); parents[pp] != "" {
				out = append(out, pid)
			}
		}
	}
	return out
}

// cpuByRole is the CPU so far of the fleet's processes by role, and of the
// shells under them ("shells").
func (f *loadFleet) cpuByRole() map[string]time.Duration {
	out := map[string]time.Duration{}
	pids := f.pids()
	for pid, role := range pids {
		out[role] += cpuOf(pid)
	}
	for _, pid := range childrenOf(pids) {
		out["shells"] += cpuOf(pid)
	}
	return out
}

// loadRun starts b's fleet, runs the load and measures the idle footprint.
func loadRun(t *testing.T, b loadBuild, clients, runs, idle int) loadResult {
	t.Helper()
	f := startLoadFleet(t, b)
	defer f.stop()
	if os.Getenv("FLEETMUX_BENCH_LOAD_LOGS") != "" {
		defer func() { t.Logf("%s: the processes' logs:\n%s", b.name, f.logs()) }()
	}
	addrs := f.sessions(t, clients)
	if b.trust {
		f.policyInForce(t, addrs)
	}
	res := loadResult{build: b.name, lat: make([]time.Duration, 0, clients*runs)}
	cpu0 := f.cpuByRole()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range addrs {
		wg.Go(func() {
			lat := make([]time.Duration, 0, runs)
			var errs int
			var msg string
			for j := range runs {
				tag := fmt.Sprintf("load-%d-%d", i, j)
				t0 := time.Now()
				err := f.run(a, "echo "+tag, tag)
				if err != nil {
					errs++
					msg = err.Error()
					continue
				}
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.errs += errs
			if msg != "" {
				res.firstErrMsg = msg
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	res.runs = len(res.lat)
	cpu1 := f.cpuByRole()
	res.cpu = map[string]time.Duration{}
	for k, v := range cpu1 {
		res.cpu[k] = v - cpu0[k]
	}
	if idle > 0 {
		res.idle = idle
		pssByRole := func() (map[string]int64, int64) {
			m := map[string]int64{}
			var sum int64
			for pid, role := range f.pids() {
				if u, err := procMem(pid); err == nil {
					m[role] += u.pss
					sum += u.pss
				}
			}
			return m, sum
		}
		settle := func() {
			// 5 s after the burst, as an operator would look, then until settled.
			time.Sleep(5 * time.Second) // the measurement's idle time, not synchronisation
			_, _ = settledMem(func() []int { return slices.Collect(mapKeys(f.pids())) })
		}
		settle()
		m0, s0 := pssByRole()
		f.sessions(t, idle)
		settle()
		m1, s1 := pssByRole()
		res.pssPer = (s1 - s0) / int64(idle)
		res.pssByRole = map[string]int64{}
		for k := range m1 {
			res.pssByRole[k] = (m1[k] - m0[k]) / int64(idle)
		}
	}
	return res
}

func mapKeys(m map[int]string) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestLoadReport runs the load benchmark, this tree against a baseline.
func TestLoadReport(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the load report (about a minute per pair)")
	}
	pairs := envInt(t, "FLEETMUX_BENCH_LOAD_PAIRS", 3)
	clients := envInt(t, "FLEETMUX_BENCH_LOAD_CLIENTS", 24)
	runs := envInt(t, "FLEETMUX_BENCH_LOAD_RUNS", 25)
	idle := envInt(t, "FLEETMUX_BENCH_LOAD_IDLE", 0)
	bin := os.Getenv("FLEETMUX_BENCH_NEW_BIN")
	if bin == "" {
		var err error
		if bin, err = testutil.BuildFleetmux(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	builds := []loadBuild{{name: "this tree", bin: bin}}
	old := os.Getenv("FLEETMUX_BENCH_OLD_BIN")
	if src := os.Getenv("FLEETMUX_BENCH_OLD"); src != "" {
		var err error
		if old, err = buildAt(src, t.TempDir()); err != nil {
			t.Fatal(err)
		}
		builds = append(builds, loadBuild{name: filepath.Base(src), bin: old})
	} else if old != "" {
		builds = append(builds, loadBuild{name: filepath.Base(old), bin: old})
	}
	for i := range builds {
		help, _ := exec.Command(builds[i].bin, "--help").Output()
		builds[i].trust = strings.Contains(string(help), "\n  enroll ")
	}
	var rows [][]loadResult
	for p := range pairs {
		var pair []loadResult
		for k := range builds {
			b := builds[(k+p)%len(builds)] // ABAB…, then BABA…: alternating
			r := loadRun(t, b, clients, runs, idle)
			t.Logf("pair %d %s: %.0f runs/s p50 %v p99 %v errors %d %s", p+1, b.name, r.rate(),
				percentile(r.lat, 50), percentile(r.lat, 99), r.errs, r.firstErrMsg)
			pair = append(pair, r)
		}
		slices.SortFunc(pair, func(a, b loadResult) int {
			return slices.IndexFunc(builds, func(x loadBuild) bool { return x.name == a.build }) -
				slices.IndexFunc(builds, func(x loadBuild) bool { return x.name == b.build })
		})
		rows = append(rows, pair)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, %d CPUs, %s; load average %s; %d clients × %d runs of `echo load-N`\n\n",
		time.Now().Format("2006-01-02 15:04"), runtime.NumCPU(), runtime.Version(), loadAverage(), clients, runs)
	roles := []string{"ctl-api", "ctl-nats", "node", "holder", "shells"}
	fmt.Fprintf(&out, "| pair | build | runs/s | p50 | p99 | errors | CPU/run all |")
	for _, r := range roles {
		fmt.Fprintf(&out, " CPU/run %s |", r)
	}
	if idle > 0 {
		fmt.Fprintf(&out, " PSS/idle session (%d) |", idle)
	}
	fmt.Fprintf(&out, "\n|---|---|---:|---:|---:|---:|---:|%s%s\n", strings.Repeat("---:|", len(roles)), map[bool]string{true: "---|", false: ""}[idle > 0])
	for p, pair := range rows {
		for _, r := range pair {
			fmt.Fprintf(&out, "| %d | %s | %.0f | %.1f ms | %.1f ms | %d |", p+1, r.build, r.rate(),
				micros(percentile(r.lat, 50))/1000, micros(percentile(r.lat, 99))/1000, r.errs)
			var all time.Duration
			for _, role := range roles {
				all += r.cpu[role]
			}
			fmt.Fprintf(&out, " %.0f µs |", micros(all)/float64(max(r.runs, 1)))
			for _, role := range roles {
				fmt.Fprintf(&out, " %.0f µs |", micros(r.cpu[role])/float64(max(r.runs, 1)))
			}
			if idle > 0 {
				fmt.Fprintf(&out, " %d KiB (%v) |", r.pssPer, r.pssByRole)
			}
			out.WriteString("\n")
		}
	}
	if len(builds) == 2 {
		out.WriteString("\n| pair | runs/s ratio (this ÷ base) | p50 ratio | p99 ratio | CPU/run ratio |\n|---|---:|---:|---:|---:|\n")
		for p, pair := range rows {
			a, b := pair[0], pair[1]
			fmt.Fprintf(&out, "| %d | %.2f | %.2f | %.2f | %.2f |\n", p+1, a.rate()/b.rate(),
				float64(percentile(a.lat, 50))/float64(percentile(b.lat, 50)), float64(percentile(a.lat, 99))/float64(percentile(b.lat, 99)),
				a.cpuPerRun()/b.cpuPerRun())
		}
	}
	fmt.Print(out.String())
}
