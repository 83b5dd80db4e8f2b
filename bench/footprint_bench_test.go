package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
)

// The footprint of idle sessions (issue 18, part 2): N idle bash sessions (at their
// prompt, no output) on a real `fleetmux dev` (its own process, the real binary: the
// controller, the embedded NATS server and the node agent, plus the holder process
// when the node keeps its sessions in one), next to a private tmux server with N
// panes, in the same run. Reported: the memory of every fleetmux process (RSS and
// PSS from /proc/PID/smaps_rollup) before the sessions and once they are idle, per
// session; the tmux server's the same way, per pane. The shells themselves are
// neither's: only the multiplexer's processes count.
//
// FLEETMUX_BENCH_OLD=DIR also builds the fleetmux of the source tree in DIR (e.g. a
// `git worktree` of the commit before a change) and measures it in the same run, so
// before and after sit side by side.

// memUse is the memory of a set of processes, in KiB, and their threads.
type memUse struct{ rss, pss, threads int64 }

func (m memUse) sub(o memUse) memUse {
	return memUse{m.rss - o.rss, m.pss - o.pss, m.threads - o.threads}
}

// threadsOf is the number of threads of pid.
func threadsOf(pid int) int64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// procMem reads Rss and Pss of pid from /proc/PID/smaps_rollup (kB).
func procMem(pid int) (memUse, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return memUse{}, err
	}
	defer f.Close()
	var m memUse
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) < 1 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "Rss":
			m.rss = n
		case "Pss":
			m.pss = n
		}
	}
	return m, sc.Err()
}

// procsOf are the pids of the processes running the executable bin (the dev
// process and a holder it launched).
func procsOf(bin string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && exe == bin {
			out = append(out, pid)
		}
	}
	return out
}

// memOf sums the memory of pids.
func memOf(pids []int) (memUse, error) {
	var sum memUse
	for _, p := range pids {
		m, err := procMem(p)
		if err != nil {
			return memUse{}, err
		}
		sum.rss += m.rss
		sum.pss += m.pss
		sum.threads += threadsOf(p)
	}
	return sum, nil
}

// settledMem samples the memory of the processes pids() names every 250 ms until
// two samples a second apart differ by less than 1% (or 15 s passed), and returns
// the last one: a Go process frees and returns memory a little after a burst.
func settledMem(pids func() []int) (memUse, error) {
	deadline := time.Now().Add(15 * time.Second)
	var hist []memUse
	for {
		m, err := memOf(pids())
		if err != nil {
			return memUse{}, err
		}
		hist = append(hist, m)
		if len(hist) > 4 {
			prev := hist[len(hist)-5]
			d := m.rss - prev.rss
			if d < 0 {
				d = -d
			}
			if d*100 < m.rss || time.Now().After(deadline) {
				return m, nil
			}
		}
		time.Sleep(250 * time.Millisecond) // sampling, not synchronisation
	}
}

// footprint is what one multiplexer cost for n idle sessions.
type footprint struct {
	name          string
	procs         int
	before, after memUse
	n             int
	// parts: each process's RSS before and after (KiB), by role ("dev", "holder"),
	// when there is more than one.
	parts []footprintPart
}

// footprintPart is one process's share of a footprint.
type footprintPart struct {
	role          string
	before, after int64
}

// roleOf names what process pid is: "holder" for a holder, else "dev".
func roleOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if args := strings.Split(string(b), "\x00"); len(args) > 1 && args[1] == "holder" {
		return "holder"
	}
	return "dev"
}

// rssByRole is the RSS of pids by roleOf.
func rssByRole(pids []int) map[string]int64 {
	out := map[string]int64{}
	for _, p := range pids {
		if m, err := procMem(p); err == nil {
			out[roleOf(p)] += m.rss
		}
	}
	return out
}

func (f footprint) per() memUse {
	d := f.after.sub(f.before)
	return memUse{d.rss / int64(f.n), d.pss / int64(f.n), d.threads}
}

// devFootprint starts `fleetmux dev` from bin, one warm-up session (not counted),
// then n sessions, waits until all are idle at their prompt, and measures.
// holderFlag is dev's --holder flag ("" for a build that has none): with --holder,
// dev keeps its sessions in a holder process, whose memory counts too.
func devFootprint(t *testing.T, e benchEnv, name, bin string, n int, holderFlag string) footprint {
	t.Helper()
	dir := t.TempDir()
	out := &testutil.Buffer{Tail: 8 << 10}
	args := []string{"dev", "--data", filepath.Join(dir, "data"), "--name", devNode,
		"--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0",
		"--ssh-listen", "off", "--max-sessions", strconv.Itoa(n + 1)}
	if holderFlag != "" {
		args = append(args, holderFlag)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = e.dir, slices.Clone(e.base)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &devProc{cmd: cmd, out: out}
	defer func() {
		d.stop()
		for _, p := range procsOf(bin) { // a holder outlives dev by design
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "fleetmux dev is up") {
		if time.Now().After(deadline) {
			t.Fatalf("%s: fleetmux dev did not come up: %s", name, out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	m := devUpRe.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("%s: no HTTP address: %s", name, out.String())
	}
	tok, err := os.ReadFile(filepath.Join(dir, "data", "token"))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	defer tr.CloseIdleConnections()
	api_ := &ctlStack{base: m[1], http: &http.Client{Transport: tr, Timeout: time.Minute}, dir: e.dir, token: strings.TrimSpace(string(tok))}
	idle := func(addr string) error {
		var wr api.WaitResult
		if err := api_.do("GET", "/v1/sessions/"+addr+"/wait?until=idle&timeout_ms=30000", nil, &wr); err != nil {
			return err
		}
		if !wr.OK {
			return fmt.Errorf("%s: not idle: %+v", addr, wr.Session)
		}
		return nil
	}
	warm, err := api_.newSession(devNode)
	if err == nil {
		err = api_.apiRun(warm)
	}
	if err != nil {
		t.Fatalf("%s: warm-up session: %v", name, err)
	}
	pids := func() []int { return procsOf(bin) }
	time.Sleep(2 * time.Second) // as below: after the warm-up's reclaim
	before, err := settledMem(pids)
	if err != nil {
		t.Fatal(err)
	}
	partsBefore := rssByRole(pids())
	addrs := make([]string, n)
	for i := range addrs {
		if addrs[i], err = api_.newSession(devNode); err != nil {
			t.Fatalf("%s: session %d: %v", name, i+1, err)
		}
	}
	for _, a := range addrs {
		if err := idle(a); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// The agent returns a burst's garbage to the OS a second after the burst
	// (node.Config.ReclaimAfter, as `fleetmux dev` and `node` set it): measure once
	// that has happened, as an agent of idle sessions is.
	time.Sleep(2 * time.Second) // measurement protocol, not synchronisation
	after, err := settledMem(pids)
	if err != nil {
		t.Fatal(err)
	}
	f := footprint{name: name, procs: len(pids()), before: before, after: after, n: n}
	if partsAfter := rssByRole(pids()); len(partsAfter) > 1 {
		for _, role := range []string{"dev", "holder"} {
			f.parts = append(f.parts, footprintPart{role, partsBefore[role], partsAfter[role]})
		}
	}
	return f
}

// tmuxFootprint starts a private tmux server with one pane, then n more windows of
// one pane each running the same bash, and measures the server.
func tmuxFootprint(t *testing.T, e benchEnv, n int) (footprint, bool) {
	t.Helper()
	tm, err := startTmux(e, t.TempDir())
	if err != nil {
		t.Logf("tmux: %v: no tmux row", err)
		return footprint{}, false
	}
	defer tm.Close()
	pids := func() []int { return []int{tm.pid} }
	before, err := settledMem(pids)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := tm.tmux(opTimeout, "new-window", "-d", "-t", tm.target, "-c", e.dir, "bash"); err != nil {
			t.Fatalf("tmux window %d: %v", i+1, err)
		}
	}
	// Every pane's bash is at its prompt once it has printed one: wait for it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := tm.tmux(opTimeout, "list-panes", "-s", "-t", tm.target, "-F", "#{cursor_x}")
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, l := range strings.Fields(string(out)) {
			if l != "0" {
				ready++
			}
		}
		if ready >= n+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tmux: only %d of %d panes show a prompt", ready, n+1)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	after, err := settledMem(pids)
	if err != nil {
		t.Fatal(err)
	}
	return footprint{name: "tmux", procs: 1, before: before, after: after, n: n}, true
}

// buildAt builds ./cmd/fleetmux of the module in src into dir.
func buildAt(src, dir string) (string, error) {
	bin := filepath.Join(dir, "fleetmux")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/fleetmux")
	cmd.Dir, cmd.Env = src, append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %w\n%s", src, err, out)
	}
	return bin, nil
}

// TestFootprintReport measures the memory of idle sessions, fleetmux next to tmux.
func TestFootprintReport(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the footprint report (about a minute)")
	}
	n := envInt(t, "FLEETMUX_BENCH_SESSIONS", 100)
	e := newBenchEnv(t)
	type build struct {
		name, bin string
		holder    string // dev's --holder flag
	}
	bin, err := testutil.BuildFleetmux(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	builds := []build{{"fleetmux (this tree)", bin, "--holder=false"}, {"fleetmux --holder (this tree)", bin, "--holder"}}
	if old := os.Getenv("FLEETMUX_BENCH_OLD"); old != "" {
		ob, err := buildAt(old, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		builds = append([]build{{"fleetmux (" + filepath.Base(old) + ")", ob, ""}}, builds...)
	}
	var rows []footprint
	for _, b := range builds {
		rows = append(rows, devFootprint(t, e, b.name, b.bin, n, b.holder))
	}
	if f, ok := tmuxFootprint(t, e, n); ok {
		rows = append(rows, f)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, %d CPUs (nproc), %s, %s, %s; load average %s\n\n", time.Now().Format("2006-01-02"), runtime.NumCPU(),
		runtime.Version(), toolVersion("bash", "--version"), toolVersion("tmux", "-V"), loadAverage())
	fmt.Fprintf(&out, "%d idle bash sessions (panes):\n\n", n)
	fmt.Fprintf(&out, "| | processes | RSS before | RSS after | **RSS per session** | PSS before | PSS after | PSS per session | threads before → after |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		p := r.per()
		fmt.Fprintf(&out, "| %s | %d | %d KiB | %d KiB | **%d KiB** | %d KiB | %d KiB | %d KiB | %d → %d |\n", r.name, r.procs,
			r.before.rss, r.after.rss, p.rss, r.before.pss, r.after.pss, p.pss, r.before.threads, r.after.threads)
		for _, part := range r.parts {
			fmt.Fprintf(&out, "| … of which the %s process | 1 | %d KiB | %d KiB | %d KiB | | | | |\n", part.role,
				part.before, part.after, (part.after-part.before)/int64(r.n))
		}
	}
	fmt.Print(out.String())
}

// TestFootprintHeap is where a node agent's memory per idle session goes, in
// process: a node on an embedded NATS server, N idle bash sessions, then the Go
// heap (runtime.MemStats after a GC), the goroutine stacks and the goroutine count
// per session. FLEETMUX_BENCH_HEAPPROFILE=FILE writes the heap profile with the
// sessions open (go tool pprof -sample_index=inuse_space FILE);
// FLEETMUX_BENCH_HOLDER=1 keeps the sessions in a holder (in this process too).
func TestFootprintHeap(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the footprint report")
	}
	n := envInt(t, "FLEETMUX_BENCH_SESSIONS", 100)
	if os.Getenv("FLEETMUX_BENCH_HEAPPROFILE") != "" || os.Getenv("FLEETMUX_BENCH_IDLEPROFILE") != "" {
		// Every allocation sampled: the default (one per 512 KiB) says nothing about
		// objects of a few hundred bytes per session.
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		defer func() { runtime.MemProfileRate = old }()
	}
	e := newBenchEnv(t)
	t.Setenv("HOME", e.home)
	srv := testutil.StartNATS(t, t.TempDir())
	ctx := context.Background()
	bus, err := transport.Connect(ctx, transport.NATSConfig{URL: srv.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	tr := testutil.NewTrust(t)
	ncfg := node.Config{Name: "bench", DataDir: t.TempDir(), Bus: bus, Verifier: tr.Verifier, MaxSessions: n + 1, Logger: quietLogger()}
	if os.Getenv("FLEETMUX_BENCH_HOLDER") == "1" {
		// The holder in this process too: its share is in the figures (the heap
		// profile tells the two apart by function).
		dir := filepath.Join(t.TempDir(), "holder")
		hs, err := holder.Listen(holder.Config{Dir: dir, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		hctx, hcancel := context.WithCancel(context.Background())
		served := make(chan struct{})
		go func() { defer close(served); _ = hs.Serve(hctx) }()
		defer func() { hcancel(); <-served; hs.Close() }()
		if ncfg.Holder, err = holder.Dial(context.Background(), dir); err != nil {
			t.Fatal(err)
		}
		defer ncfg.Holder.Close()
	}
	if os.Getenv("FLEETMUX_BENCH_GUARD") == "1" {
		// A policy source, as every agent on a fleet's bus has: the sessions are guarded.
		ncfg.Policy = transport.NewPolicyReader(bus.NC(), quietLogger())
	}
	nd, err := node.New(ncfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Start(); err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	client, err := transport.Connect(ctx, transport.NATSConfig{URL: srv.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var subj api.Subjects
	call := func(verb string, req, reply any) error {
		data, _ := json.Marshal(req)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		subject := subj.RPC("bench", verb)
		b, err := client.Request(ctx, subject, tr.Header(t, subject, data, "bench", api.RoleAdmin), data)
		if err != nil {
			return err
		}
		if reply != nil {
			return json.Unmarshal(b, reply)
		}
		return nil
	}
	create := func() (string, error) {
		var s api.Session
		err := call("create", api.CreateRequest{Cwd: e.dir}, &s)
		return s.ID, err
	}
	waitIdle := func(id string) error {
		var wr api.WaitResult
		if err := call("wait", api.WaitRequest{Session: id, Until: string(api.UntilIdle), TimeoutMS: 30000}, &wr); err != nil {
			return err
		}
		if !wr.OK {
			return fmt.Errorf("%s not idle", id)
		}
		return nil
	}
	if id, err := create(); err != nil || waitIdle(id) != nil {
		t.Fatalf("warm-up session: %v", err)
	}
	measure := func() (runtime.MemStats, int) {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms, runtime.NumGoroutine()
	}
	m0, g0 := measure()
	ids := make([]string, n)
	for i := range ids {
		if ids[i], err = create(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- waitIdle(id) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	m1, g1 := measure()
	if p := os.Getenv("FLEETMUX_BENCH_HEAPPROFILE"); p != "" {
		var buf bytes.Buffer
		if err := pprof.Lookup("heap").WriteTo(&buf, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// What the idle sessions allocate (garbage the next collection takes, resident
	// until then): FLEETMUX_BENCH_IDLEPROFILE=FILE writes the allocation profile
	// of the idle spell, FILE.base the one before it (go tool pprof
	// -sample_index=alloc_space -diff_base FILE.base FILE).
	idleFor := 5 * time.Second
	writeAllocs := func(p string) {
		var buf bytes.Buffer
		if err := pprof.Lookup("allocs").WriteTo(&buf, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if p := os.Getenv("FLEETMUX_BENCH_IDLEPROFILE"); p != "" {
		writeAllocs(p + ".base")
	}
	var m1b runtime.MemStats
	runtime.ReadMemStats(&m1b)
	time.Sleep(idleFor) // the idle spell measured, not synchronisation
	var m2 runtime.MemStats
	runtime.ReadMemStats(&m2)
	if p := os.Getenv("FLEETMUX_BENCH_IDLEPROFILE"); p != "" {
		writeAllocs(p)
	}
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) / 1024 }
	defer fmt.Printf("\nAllocated while idle: %.1f KiB per session per second (%d sessions, %v)\n",
		per(m1b.TotalAlloc, m2.TotalAlloc)/idleFor.Seconds(), n, idleFor)
	fmt.Printf("\nIn-process node agent, %d idle bash sessions, per session (after a GC):\n\n", n)
	fmt.Printf("| heap in use | heap objects | stacks in use | goroutines | Sys (all the runtime holds) |\n|---:|---:|---:|---:|---:|\n")
	fmt.Printf("| %.1f KiB | %.0f | %.1f KiB | %.1f | %.1f KiB |\n", per(m0.HeapInuse, m1.HeapInuse),
		(float64(m1.HeapObjects)-float64(m0.HeapObjects))/float64(n), per(m0.StackInuse, m1.StackInuse),
		float64(g1-g0)/float64(n), per(m0.Sys, m1.Sys))
}
