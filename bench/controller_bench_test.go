package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/trust"
)

// The controller benchmarks: the whole stack in one process (embedded NATS with
// JetStream and fleetmux's streams, node agents each on a NATS connection of its
// own, a controller on another one serving the HTTP API on loopback) and an HTTP
// client with keep-alive, the way an agent calls the API.

const (
	fanoutNodes           = 4
	fanoutSessionsPerNode = 50
	fanoutTargets         = fanoutNodes * fanoutSessionsPerNode

	// idleGap is the pause before each request of BenchmarkAPIRoundTrip/api-idle5ms.
	idleGap = 5 * time.Millisecond
)

// ctlStack is NATS, node agents n1…nK and a controller whose node table is fed by
// hand (no gossip: the bench measures requests, not discovery).
type ctlStack struct {
	ctl  *controller.Controller
	base string // http://127.0.0.1:PORT
	http *http.Client
	dir  string          // the sessions' cwd
	nats string          // the NATS server's client URL
	keys *testutil.Trust // the controller's signer; the nodes trust its root
	// token is the API token the requests carry (default benchToken).
	token string
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startCtlStack(tb testing.TB, e benchEnv, nodes int) *ctlStack {
	tb.Helper()
	// The sessions' shells must not read the tester's rc files.
	tb.Setenv("HOME", e.home)
	srv := testutil.StartNATS(tb, tb.TempDir())
	ctx := context.Background()
	connect := func(name string) *transport.Conn {
		c, err := transport.Connect(ctx, transport.NATSConfig{URL: srv.ClientURL(), Name: name, Logger: quietLogger()})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		return c
	}
	ctlConn := connect("controller")
	// As `fleetmux dev` and `fleetmux controller --nats-listen` do: output and events
	// also go to JetStream streams (FLEETMUX_BENCH_JETSTREAM=0 leaves them out, to
	// see what they cost).
	if os.Getenv("FLEETMUX_BENCH_JETSTREAM") != "0" {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := transport.EnsureStreams(sctx, ctlConn.NC(), "", transport.StreamLimits{})
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
	}
	keys := testutil.NewTrust(tb)
	ctl, err := controller.New(controller.Config{Name: "ctl", Bus: ctlConn, Signer: keys.Signer, Token: benchToken, Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Listen: "127.0.0.1:0", Fleet: ctl, Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	if err := ctl.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ctl.Close() })
	if err := h.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	for i := 1; i <= nodes; i++ {
		name := fmt.Sprintf("n%d", i)
		n, err := node.New(node.Config{Name: name, DataDir: tb.TempDir(), Bus: connect(name), Verifier: keys.NewVerifier(tb), Logger: quietLogger()})
		if err != nil {
			tb.Fatal(err)
		}
		if err := n.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { n.Close() })
		ctl.Observe(controller.Member{Name: name, Addr: "127.0.0.1:0", State: api.NodeAlive, Meta: api.NodeMeta{Name: name}})
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: time.Minute}
	tb.Cleanup(tr.CloseIdleConnections)
	return &ctlStack{ctl: ctl, base: "http://" + h.Addr(), http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}, dir: e.dir, nats: srv.ClientURL(), keys: keys}
}

// do sends one API request and decodes the JSON reply into out. The body is read
// to its end, so the connection goes back to the pool.
func (s *ctlStack) do(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err == nil {
		tok := s.token
		if tok == "" {
			tok = benchToken
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
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
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode reply: %w", method, path, err)
		}
	}
	return nil
}

// newSession creates a bash session on node through the API; it returns NODE/ID.
func (s *ctlStack) newSession(node string) (string, error) {
	var sess api.Session
	if err := s.do("POST", "/v1/sessions", api.NewSession{Node: node, CreateRequest: api.CreateRequest{Cwd: s.dir}}, &sess); err != nil {
		return "", err
	}
	return sess.Node + "/" + sess.ID, nil
}

// apiRun is `fleetmux run ADDR -- true` at the HTTP level: POST …/run, and check the
// block finished with exit code 0.
func (s *ctlStack) apiRun(addr string) error {
	var r api.BlockResult
	if err := s.do("POST", "/v1/sessions/"+addr+"/run", api.RunBody{Command: "true", TimeoutMS: int(opTimeout / time.Millisecond)}, &r); err != nil {
		return err
	}
	if r.Block.State != "done" || r.Block.ExitCode == nil || *r.Block.ExitCode != 0 {
		return fmt.Errorf("run on %s: block %d %s, exit code %v", addr, r.Block.N, r.Block.State, r.Block.ExitCode)
	}
	return nil
}

// startAPISession creates the round-trip session on n1 and runs a first command
// (it waits for the first prompt) outside any measurement.
func (s *ctlStack) startAPISession(tb testing.TB) func() error {
	tb.Helper()
	addr, err := s.newSession("n1")
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.apiRun(addr); err != nil {
		tb.Fatal(err)
	}
	return func() error { return s.apiRun(addr) }
}

// fanoutSessions creates perNode sessions on each of n1…nK (8 creations at a time)
// and returns their addresses.
func (s *ctlStack) fanoutSessions(tb testing.TB, nodes, perNode int) []string {
	tb.Helper()
	var (
		mu    sync.Mutex
		addrs []string
		errs  []error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 8)
	)
	for i := 1; i <= nodes; i++ {
		for range perNode {
			wg.Add(1)
			sem <- struct{}{}
			go func() { // joined below
				defer wg.Done()
				defer func() { <-sem }()
				a, err := s.newSession(fmt.Sprintf("n%d", i))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				} else {
					addrs = append(addrs, a)
				}
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	slices.Sort(addrs)
	return addrs
}

// fanout runs `true` on every target with POST /v1/run and returns each target's
// duration_ms.
func (s *ctlStack) fanout(targets []string) ([]time.Duration, error) {
	var out api.Fanout
	err := s.do("POST", "/v1/run", api.FanoutRequest{
		Selector: api.Selector{Sessions: targets}, Command: "true", TimeoutMS: 60_000,
	}, &out)
	if err != nil {
		return nil, err
	}
	if out.OK != len(targets) || len(out.Results) != len(targets) {
		for _, r := range out.Results {
			if r.Error != nil {
				return nil, fmt.Errorf("fan-out: %d ok, %d failed; %s/%s: %v", out.OK, out.Failed, r.Node, r.Session, r.Error)
			}
		}
		return nil, fmt.Errorf("fan-out: %d ok, %d failed, %d results, want %d ok", out.OK, out.Failed, len(out.Results), len(targets))
	}
	ds := make([]time.Duration, len(out.Results))
	for i, r := range out.Results {
		ds[i] = time.Duration(r.DurationMS) * time.Millisecond
	}
	return ds, nil
}

// ---- benchmarks ----

// BenchmarkAPIRoundTrip: `run` of `true` through the controller's HTTP API next to
// the ways of running a command without fleetmux (raw PTY, tmux, ssh).
func BenchmarkAPIRoundTrip(b *testing.B) {
	b.Run("api", func(b *testing.B) {
		s := startCtlStack(b, newBenchEnv(b), 1)
		benchLatency(b, s.startAPISession(b))
	})
	// The same with the machine idle for 5 ms before each request (untimed), as
	// between the calls of an agent: back to back, the runtime's threads are still
	// spinning when the next request comes; after a pause every goroutine hop of
	// the path (HTTP server, NATS client and server, node, session) waits for a
	// parked thread to wake up.
	b.Run("api-idle5ms", func(b *testing.B) {
		s := startCtlStack(b, newBenchEnv(b), 1)
		run := s.startAPISession(b)
		var ds []time.Duration
		for b.Loop() {
			// Not b.StopTimer: it reads the memory stats, stopping the world. So
			// ns/op includes the pause; p50-µs and p99-µs do not.
			time.Sleep(idleGap)
			t0 := time.Now()
			if err := run(); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		b.ReportMetric(micros(percentile(ds, 50)), "p50-µs")
		b.ReportMetric(micros(percentile(ds, 99)), "p99-µs")
	})
	b.Run("rawpty", func(b *testing.B) {
		r, err := startRawPTY(newBenchEnv(b))
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		benchLatency(b, r.roundTrip)
	})
	b.Run("tmux", func(b *testing.B) {
		t, err := startTmux(newBenchEnv(b), b.TempDir())
		if errors.Is(err, errNoTmux) {
			testutil.Missing(b, "%v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		defer t.Close()
		benchLatency(b, t.roundTrip)
	})
	b.Run("ssh", func(b *testing.B) {
		d, err := startSSH(newBenchEnv(b), b.TempDir())
		if errors.Is(err, errNoSSHD) {
			testutil.Missing(b, "%v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		benchLatency(b, d.exec)
	})
	b.Run("ssh-mux", func(b *testing.B) {
		d, err := startSSH(newBenchEnv(b), b.TempDir())
		if errors.Is(err, errNoSSHD) {
			testutil.Missing(b, "%v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		if err := d.startMaster(); err != nil {
			b.Fatal(err)
		}
		benchLatency(b, d.execMux)
	})
}

// BenchmarkFanout200: one POST /v1/run of `true` to 200 sessions (4 nodes × 50)
// per iteration. Reports the fan-out's total time (p50/p99, ms) and the targets'
// duration_ms (p50/p99 over every target of every iteration).
func BenchmarkFanout200(b *testing.B) {
	s := startCtlStack(b, newBenchEnv(b), fanoutNodes)
	targets := s.fanoutSessions(b, fanoutNodes, fanoutSessionsPerNode)
	if _, err := s.fanout(targets); err != nil { // warm-up: the first prompts
		b.Fatal(err)
	}
	var totals, per []time.Duration
	for b.Loop() {
		t0 := time.Now()
		ds, err := s.fanout(targets)
		if err != nil {
			b.Fatal(err)
		}
		totals = append(totals, time.Since(t0))
		per = append(per, ds...)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(totals, 50)), "total-p50-ms")
	b.ReportMetric(ms(percentile(totals, 99)), "total-p99-ms")
	b.ReportMetric(ms(percentile(per, 50)), "target-p50-ms")
	b.ReportMetric(ms(percentile(per, 99)), "target-p99-ms")
}

// ---- smoke test (runs in CI: a few requests through the stack) ----

func TestControllerDrivers(t *testing.T) {
	e := newBenchEnv(t)
	s := startCtlStack(t, e, 2)
	run := s.startAPISession(t)
	for range 3 {
		if err := run(); err != nil {
			t.Fatal(err)
		}
	}
	targets := s.fanoutSessions(t, 2, 2)
	for range 2 {
		ds, err := s.fanout(targets)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 4 {
			t.Fatalf("fan-out: %d durations, want 4", len(ds))
		}
	}
	if testing.Short() || os.Getenv("FLEETMUX_BENCH_SSH") == "" {
		return // sshd is rarely installed (and needs root or a matching user): opt in
	}
	d, err := startSSH(e, t.TempDir())
	if errors.Is(err, errNoSSHD) {
		testutil.Missing(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.exec(); err != nil {
		t.Fatal(err)
	}
	if err := d.startMaster(); err != nil {
		t.Fatal(err)
	}
	if err := d.execMux(); err != nil {
		t.Fatal(err)
	}
}

// ---- report ----

// TestControllerBenchReport (only with FLEETMUX_BENCH_REPORT=1) runs the round-trip
// variants interleaved in rotating order, as TestBenchReport does, then the 200
// session fan-out, and prints the markdown tables of README.md.
func TestControllerBenchReport(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the controller benchmark report (about a minute)")
	}
	rounds := envInt(t, "FLEETMUX_BENCH_ROUNDS", 300)
	sshRounds := envInt(t, "FLEETMUX_BENCH_SSH_ROUNDS", 50)
	fanRuns := envInt(t, "FLEETMUX_BENCH_FANOUT_RUNS", 10)
	loadAvg := loadAverage()
	e := newBenchEnv(t)

	st := startCtlStack(t, e, fanoutNodes)
	type variant struct {
		name, what string
		op         func() error
		ds         []time.Duration
		every      int // runs in one round of every so many (ssh: 0.2–0.7 s a command)
	}
	rt := []*variant{{name: "api", what: "POST /v1/sessions/n1/ID/run over HTTP keep-alive → controller → NATS → node → session", op: st.startAPISession(t)}}

	// Diagnostics: the same command one and two layers down.
	ss := startSession(t, e)
	rt = append(rt, &variant{name: "session", what: "session.Run in-process (no NATS, no HTTP)", op: func() error { _, err := sessionRun(ss, "true", opTimeout); return err }})
	nc, err := transport.Connect(context.Background(), transport.NATSConfig{URL: st.nats, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	natsAddr, err := st.newSession("n1")
	if err != nil {
		t.Fatal(err)
	}
	natsRun := func() error { return nodeRPCRun(nc, st.keys, natsAddr) }
	if err := natsRun(); err != nil {
		t.Fatal(err)
	}
	rt = append(rt, &variant{name: "nats", what: "the node's run verb over NATS request/reply (no controller)", op: natsRun})

	r, err := startRawPTY(e)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rt = append(rt, &variant{name: "rawpty", what: "raw PTY, echo marker (no exit code)", op: r.roundTrip})
	var notes []string
	tm, err := startTmux(e, t.TempDir())
	switch {
	case errors.Is(err, errNoTmux):
		notes = append(notes, "tmux not installed: no tmux row")
	case err != nil:
		t.Fatal(err)
	default:
		defer tm.Close()
		rt = append(rt, &variant{name: "tmux", what: "tmux send-keys + wait-for", op: tm.roundTrip})
	}
	sshV := "OpenSSH missing"
	sd, err := startSSH(e, t.TempDir())
	switch {
	case errors.Is(err, errNoSSHD):
		notes = append(notes, "no ssh rows: "+err.Error())
	case err != nil:
		t.Fatal(err)
	default:
		defer sd.Close()
		sshV = sshVersion()
		every := max(1, rounds/sshRounds)
		rt = append(rt, &variant{name: "ssh", what: "`ssh -i KEY -p PORT USER@127.0.0.1 true`, a fresh connection each", op: sd.exec, every: every})
		if err := sd.startMaster(); err != nil {
			t.Fatal(err)
		}
		rt = append(rt, &variant{name: "ssh-mux", what: "the same over a ControlMaster connection", op: sd.execMux})
	}

	if only := os.Getenv("FLEETMUX_BENCH_ONLY"); only != "" { // e.g. api,rawpty
		want := strings.Split(only, ",")
		rt = slices.DeleteFunc(rt, func(v *variant) bool { return v.name != "rawpty" && !slices.Contains(want, v.name) })
	}
	const warmup = 20
	// Each operation starts after a pause (untimed), as an agent's calls come between
	// its turns, and so the trailing work of the one before (tmux goes on working
	// after wait-for returns, ssh and its processes exit) does not land on it.
	gap := time.Duration(envInt(t, "FLEETMUX_BENCH_GAP_MS", 5)) * time.Millisecond
	for i := range warmup + rounds {
		for j := range rt {
			v := rt[(i+j)%len(rt)]
			if v.every > 1 && i%v.every != 0 {
				continue
			}
			time.Sleep(gap)
			t0 := time.Now()
			if err := v.op(); err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			if i >= warmup {
				v.ds = append(v.ds, time.Since(t0))
			}
		}
	}

	// Fan-out: 200 sessions, created up front, one warm-up fan-out.
	loadFan := loadAverage()
	c0 := time.Now()
	targets := st.fanoutSessions(t, fanoutNodes, fanoutSessionsPerNode)
	created := time.Since(c0)
	if _, err := st.fanout(targets); err != nil {
		t.Fatal(err)
	}
	var totals, per []time.Duration
	for range fanRuns {
		t0 := time.Now()
		ds, err := st.fanout(targets)
		if err != nil {
			t.Fatal(err)
		}
		totals = append(totals, time.Since(t0))
		per = append(per, ds...)
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, %d CPUs (nproc), %s %s/%s, %s, %s, %s\n\n", time.Now().Format("2006-01-02"),
		runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, toolVersion("bash", "--version"), toolVersion("tmux", "-V"), sshV)
	for _, n := range notes {
		fmt.Fprintf(&out, "note: %s\n", n)
	}
	fmt.Fprintf(&out, "Round trip (`true`), %d interleaved rounds after %d warm-up rounds, every variant once a round but ssh (one round in %d), each run after %v idle (load average before: %s):\n\n",
		rounds, warmup, max(1, rounds/sshRounds), gap, loadAvg)
	fmt.Fprintf(&out, "| variant | runs | p50 | p99 | p50 / rawpty | p99 / rawpty | what |\n|---|---:|---:|---:|---:|---:|---|\n")
	var base *variant
	for _, v := range rt {
		if v.name == "rawpty" {
			base = v
		}
	}
	for _, v := range rt {
		p50, p99 := percentile(v.ds, 50), percentile(v.ds, 99)
		fmt.Fprintf(&out, "| %s | %d | %.0f µs | %.0f µs | %.2f× | %.2f× | %s |\n", v.name, len(v.ds), micros(p50), micros(p99),
			float64(p50)/float64(percentile(base.ds, 50)), float64(p99)/float64(percentile(base.ds, 99)), v.what)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintf(&out, "\nFan-out of `true` to %d sessions (%d nodes × %d; created in %.1f s), %d runs after 1 warm-up (load average before: %s):\n\n",
		fanoutTargets, fanoutNodes, fanoutSessionsPerNode, created.Seconds(), fanRuns, loadFan)
	fmt.Fprintf(&out, "| | min | p50 | p99 | max |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(&out, "| POST /v1/run, total | %.0f ms | %.0f ms | %.0f ms | %.0f ms |\n", ms(slices.Min(totals)), ms(percentile(totals, 50)), ms(percentile(totals, 99)), ms(slices.Max(totals)))
	fmt.Fprintf(&out, "| per target `duration_ms` | %.0f ms | %.0f ms | %.0f ms | %.0f ms |\n", ms(slices.Min(per)), ms(percentile(per, 50)), ms(percentile(per, 99)), ms(slices.Max(per)))
	api50 := percentile(rt[0].ds, 50)
	fmt.Fprintf(&out, "\n%d sequential API round trips at the api p50 would take %.0f ms, %.1f× the fan-out's p50.\n",
		fanoutTargets, ms(fanoutTargets*api50), float64(fanoutTargets*api50)/float64(percentile(totals, 50)))
	fmt.Print(out.String())
}

// nodeRPCRun sends the node's run verb for addr (NODE/ID) straight over NATS,
// signed as the controller would.
func nodeRPCRun(c *transport.Conn, keys *testutil.Trust, addr string) error {
	nodeName, id, err := api.ParseAddress(addr)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(api.RunRequest{Session: id, Command: "true", TimeoutMS: int(opTimeout / time.Millisecond)})
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	subject := api.Subjects{}.RPC(nodeName, "run")
	h, err := keys.Signer.Sign(subject, data, trust.Claims{Actor: "bench", Principal: "test:bench", Role: api.RoleAdmin})
	if err != nil {
		return err
	}
	reply, err := c.Request(ctx, subject, map[string]string{api.HeaderAuth: h}, data)
	if err != nil {
		return err
	}
	var r api.BlockResult
	if err := json.Unmarshal(reply, &r); err != nil || r.Block.ExitCode == nil || *r.Block.ExitCode != 0 {
		return fmt.Errorf("node run on %s: %s", addr, reply)
	}
	return nil
}

// benchToken is the benchmark controller's bootstrap admin token.
const benchToken = "bench-token"
