package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
)

// Guardrails: the cost of a policy at the node. Two node agents on one embedded
// nats-server, "plain" without a policy and "guarded" with guardPolicy in force,
// stored in the FLEETMUX_POLICY bucket and watched by the node as in production
// (transport.Policy): every run is decided against 50 rules (none of them matches
// `true`, so all 50 are tried before the default), and all output passes the
// redactor of 10 patterns before it gets offsets.

// guardPatterns are the 10 redact patterns of the guardrail benchmark.
var guardPatterns = [][2]string{
	{"aws-key", `AKIA[0-9A-Z]{16}`},
	{"private-key", `-----BEGIN [A-Z ]*PRIVATE KEY-----`},
	{"github", `gh[pousr]_[A-Za-z0-9]{36}`},
	{"slack", `xox[baprs]-[0-9A-Za-z-]{10,48}`},
	{"openai", `sk-[A-Za-z0-9]{20,64}`},
	{"stripe", `sk_live_[0-9a-zA-Z]{24}`},
	{"google", `AIza[0-9A-Za-z_-]{35}`},
	{"jwt", `eyJ[A-Za-z0-9_-]{10,200}\.eyJ[A-Za-z0-9_-]{10,200}`},
	{"password", `password=[^ \n]{1,64}`},
	{"token", `tok_[a-z0-9]{16}`},
}

// guardPolicy is a policy of 50 rules (49 deny or approve rules on commands,
// principals and labels, then a default allow) and the 10 patterns.
func guardPolicy() string {
	var b strings.Builder
	b.WriteString("version: 1\nrules:\n")
	for i := range 49 {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, "  - name: no-tool-%d\n    match: {command: '(^|[;&|]\\s*)tool%d\\s+--(force|wipe)'}\n    action: deny\n", i, i)
		case 1:
			fmt.Fprintf(&b, "  - name: prod-%d\n    match: {node_labels: {env: prod%d}, command: 'deploy%d'}\n    action: approve\n", i, i, i)
		default:
			fmt.Fprintf(&b, "  - name: ci-%d\n    match: {principal: 'token:ci%d*', command: 'rm\\s+-rf\\s+/srv/%d'}\n    action: deny\n", i, i, i)
		}
	}
	b.WriteString("  - name: default\n    action: allow\nredact:\n")
	for _, p := range guardPatterns {
		fmt.Fprintf(&b, "  - {name: %s, pattern: '%s'}\n", p[0], p[1])
	}
	return b.String()
}

// guardNode is a node agent named name with one bash session (s1) and a subscriber
// of its output.
type guardNode struct {
	name   string
	client *transport.Conn
	trust  *testutil.Trust
	tb     testing.TB
	got    atomic.Int64 // the end offset of the output the subscriber has
}

func startGuardNode(tb testing.TB, e benchEnv, srv *transport.Server, name string, policy bool) *guardNode {
	tb.Helper()
	ctx := context.Background()
	bus, err := transport.Connect(ctx, transport.NATSConfig{URL: srv.ClientURL(), Name: name})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { bus.Close() })
	tr := testutil.NewTrust(tb)
	cfg := node.Config{Name: name, DataDir: tb.TempDir(), Bus: bus, Verifier: tr.Verifier, ScrollbackBytes: 64 << 20,
		Logger: slog.New(slog.DiscardHandler)}
	if policy {
		cfg.Policy = transport.NewPolicyReader(bus.NC(), cfg.Logger)
	}
	n, err := node.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := n.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.Close() })
	client, err := transport.Connect(ctx, transport.NATSConfig{URL: srv.ClientURL()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	g := &guardNode{name: name, client: client, trust: tr, tb: tb}
	sub, err := nats.Connect(srv.ClientURL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(sub.Close)
	s, err := sub.Subscribe(api.Subjects{}.All(api.KindOut, name), func(m *nats.Msg) {
		off, _ := strconv.ParseInt(m.Header.Get(api.HeaderOffset), 10, 64)
		g.got.Store(off + int64(len(m.Data)))
	})
	if err != nil {
		tb.Fatal(err)
	}
	s.SetPendingLimits(-1, -1)
	if err := sub.Flush(); err != nil {
		tb.Fatal(err)
	}
	testutil.Eventually(tb, 10*time.Second, func() bool {
		_, err := g.call("create", api.CreateRequest{Cwd: e.dir})
		return err == nil
	}, "node %s to create its session", name)
	if _, err := g.run("true"); err != nil {
		tb.Fatal(err)
	}
	return g
}

func (g *guardNode) call(verb string, req any) ([]byte, error) {
	data, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), throughputTimeout)
	defer cancel()
	subject := api.Subjects{}.RPC(g.name, verb)
	reply, err := g.client.Request(ctx, subject, g.trust.Header(g.tb, subject, data, "bench", api.RoleAdmin), data)
	if err != nil {
		return nil, err
	}
	return reply, nil
}

func (g *guardNode) run(cmd string) (api.BlockResult, error) {
	var r api.BlockResult
	reply, err := g.call("run", api.RunRequest{Session: "s1", Command: cmd, TimeoutMS: int(opTimeout / time.Millisecond)})
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(reply, &r); err != nil || r.Block.ExitCode == nil || *r.Block.ExitCode != 0 {
		return r, fmt.Errorf("node %s run %q: %s", g.name, cmd, reply)
	}
	return r, nil
}

func (g *guardNode) roundTrip() error { _, err := g.run("true"); return err }

// throughput submits payloadCmd and waits until the subscriber holds the payload
// (as BenchmarkNodeThroughput), then, untimed, for the prompt.
func (g *guardNode) throughput() (time.Duration, error) {
	t0 := time.Now()
	reply, err := g.call("run", api.RunRequest{Session: "s1", Command: payloadCmd, TimeoutMS: 1})
	var r api.BlockResult
	if err != nil || json.Unmarshal(reply, &r) != nil {
		return 0, fmt.Errorf("run: %v %s", err, reply)
	}
	want := r.Block.Start + payloadBytes // plus a CR per line on the wire
	deadline := time.Now().Add(throughputTimeout)
	for g.got.Load() < want {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("subscriber at %d, want %d", g.got.Load(), want)
		}
		time.Sleep(time.Millisecond) // polling an atomic: the measured wait
	}
	d := time.Since(t0)
	_, err = g.call("wait", api.WaitRequest{Session: "s1", Until: "idle", TimeoutMS: 60000})
	return d, err
}

// guardPair starts the plain and the guarded node, puts guardPolicy in the bucket,
// and checks that the guarded node enforces it (a fake key is redacted).
func guardPair(tb testing.TB) (plain, guarded *guardNode) {
	tb.Helper()
	e := newBenchEnv(tb)
	tb.Setenv("HOME", e.home) // the shells must not read the tester's rc files
	srv := testutil.StartNATS(tb, tb.TempDir())
	ctl, err := transport.Connect(context.Background(), transport.NATSConfig{URL: srv.ClientURL(), Name: "controller"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ctl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := transport.NewPolicy(ctl.NC(), slog.New(slog.DiscardHandler)).Put(ctx, []byte(guardPolicy())); err != nil {
		tb.Fatal(err)
	}
	plain = startGuardNode(tb, e, srv, "plain", false)
	guarded = startGuardNode(tb, e, srv, "guarded", true)
	for _, g := range []*guardNode{plain, guarded} {
		r, err := g.run("echo AKIAIOSFODNN7EXAMPLE")
		if err != nil {
			tb.Fatal(err)
		}
		if got, want := strings.TrimSpace(r.Text), map[bool]string{true: "[REDACTED:aws-key]", false: "AKIAIOSFODNN7EXAMPLE"}[g == guarded]; got != want {
			tb.Fatalf("node %s printed %q, want %q: the policy is not in force as it should be", g.name, got, want)
		}
	}
	if _, err := guarded.run("tool0 --force"); err == nil || !strings.Contains(err.Error(), "no-tool-0") {
		tb.Fatalf("guarded node ran a denied command: %v", err)
	}
	return plain, guarded
}

// TestGuardDrivers is the smoke test of the guardrail benchmark (what CI runs).
func TestGuardDrivers(t *testing.T) {
	testutil.NeedTool(t, "bash")
	plain, guarded := guardPair(t)
	for _, g := range []*guardNode{plain, guarded} {
		if err := g.roundTrip(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGuardBenchReport: the run round trip and the output throughput of a node with
// guardPolicy in force next to one without a policy, interleaved (see TestBenchReport).
func TestGuardBenchReport(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the guardrail benchmark report")
	}
	rounds := envInt(t, "FLEETMUX_BENCH_ROUNDS", 300)
	tpRuns := envInt(t, "FLEETMUX_BENCH_TP_RUNS", 3)
	loadAvg := loadAverage()
	plain, guarded := guardPair(t)
	nodes := []*guardNode{plain, guarded}
	rt := map[string][]time.Duration{}
	const warmup = 20
	for i := range warmup + rounds {
		for j := range nodes {
			g := nodes[(i+j)%len(nodes)]
			t0 := time.Now()
			if err := g.roundTrip(); err != nil {
				t.Fatal(err)
			}
			if i >= warmup {
				rt[g.name] = append(rt[g.name], time.Since(t0))
			}
		}
	}
	tp := map[string][]time.Duration{}
	for i := range tpRuns {
		for j := range nodes {
			g := nodes[(i+j)%len(nodes)]
			d, err := g.throughput()
			if err != nil {
				t.Fatal(err)
			}
			tp[g.name] = append(tp[g.name], d)
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, %d CPUs (nproc), %s %s/%s, %s, load average before: %s\n\n", time.Now().Format("2006-01-02"),
		runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, toolVersion("bash", "--version"), loadAvg)
	fmt.Fprintf(&out, "Run round trip (`true` over NATS), %d interleaved runs each after %d warm-ups; throughput (%d MB of 81-byte lines to a NATS subscriber), %d interleaved runs each:\n\n",
		rounds, warmup, payloadBytes/1_000_000, tpRuns)
	fmt.Fprintf(&out, "| node | round trip p50 | p99 | throughput median MB/s | min–max MB/s |\n|---|---:|---:|---:|---:|\n")
	mbps := func(d time.Duration) float64 { return payloadBytes / d.Seconds() / 1e6 }
	for _, g := range nodes {
		fmt.Fprintf(&out, "| %s | %.0f µs | %.0f µs | %.1f | %.1f–%.1f |\n", g.name, micros(percentile(rt[g.name], 50)), micros(percentile(rt[g.name], 99)),
			mbps(percentile(tp[g.name], 50)), mbps(slices.Max(tp[g.name])), mbps(slices.Min(tp[g.name])))
	}
	var ratios []time.Duration // guarded/plain throughput per round, × 1e6
	for i := range tp["plain"] {
		ratios = append(ratios, time.Duration(float64(tp["plain"][i])/float64(tp["guarded"][i])*1e6))
	}
	fmt.Fprintf(&out, "\nguarded / plain: round trip p50 %.2f×, p99 %.2f× (target ≤ 1.10×); throughput %.2f× (median of the rounds' ratios; target ≥ 0.8×)\n",
		float64(percentile(rt["guarded"], 50))/float64(percentile(rt["plain"], 50)),
		float64(percentile(rt["guarded"], 99))/float64(percentile(rt["plain"], 99)),
		float64(percentile(ratios, 50))/1e6)
	fmt.Print(out.String())
}
