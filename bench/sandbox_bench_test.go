package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/session"
)

// sandboxVariant is one way a session is confined in the sandbox report.
type sandboxVariant struct {
	name string
	cfg  func(c *session.Config) // nil: a plain session
}

// sandboxVariants: a plain session (what a session package user gets), one with
// a data dir hidden (what every session of a root node gets), and one under the
// issue's profile (write only the workdir, network none, 64 pids, 256 MiB), with
// the data dir hidden too.
func sandboxVariants(e benchEnv, data string) []sandboxVariant {
	return []sandboxVariant{
		{name: "plain"},
		{name: "data dir hidden", cfg: func(c *session.Config) { c.Hide = []string{data} }},
		{name: "profile", cfg: func(c *session.Config) {
			c.Hide = []string{data}
			c.Sandbox = &api.SandboxProfile{Name: "workonly", Files: api.SandboxFiles{Write: []string{e.dir}},
				Network: api.SandboxNetwork{Mode: api.NetworkNone}, Limits: api.SandboxLimits{MemoryBytes: 256 << 20, Pids: 64}}
		}},
	}
}

// startSandboxed starts a session as v says and waits for its first prompt.
func startSandboxed(tb testing.TB, e benchEnv, v sandboxVariant) *session.Session {
	tb.Helper()
	cfg := session.Config{Shell: "bash", Dir: e.dir, BaseEnv: e.base, RuntimeDir: e.runtime, Cols: cols, Rows: rows}
	if v.cfg != nil {
		v.cfg(&cfg)
	}
	s, err := session.Start(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := sessionRun(s, "true", opTimeout); err != nil {
		s.Close()
		tb.Fatal(err)
	}
	return s
}

// TestSandboxBenchReport puts sessions in a sandbox next to a plain one, in the
// same run: round trip and throughput (interleaved, rotating order), and the
// time from Start to the first finished command (spawn).
func TestSandboxBenchReport(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the sandbox report (about a minute)")
	}
	if c := sandbox.Probe(); c.Landlock < 4 || !c.NetNS || c.Cgroups == 0 {
		t.Skipf("needs root, Landlock ABI >= 4 and cgroups: %+v", c)
	}
	rounds := envInt(t, "FLEETMUX_BENCH_ROUNDS", 300)
	tpRuns := envInt(t, "FLEETMUX_BENCH_TP_RUNS", 3)
	spawns := envInt(t, "FLEETMUX_BENCH_SPAWNS", 20)
	loadAvg := loadAverage()
	e := newBenchEnv(t)
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(data, "creds"), 0o700); err != nil {
		t.Fatal(err)
	}
	vs := sandboxVariants(e, data)
	ss := make([]*session.Session, len(vs))
	for i, v := range vs {
		ss[i] = startSandboxed(t, e, v)
		defer ss[i].Close()
	}
	n := len(vs)
	rt := make([][]time.Duration, n)
	const warmup = 20
	for i := range warmup + rounds {
		for j := range n {
			k := (i + j) % n
			t0 := time.Now()
			if _, err := sessionRun(ss[k], "true", opTimeout); err != nil {
				t.Fatal(err)
			}
			if i >= warmup {
				rt[k] = append(rt[k], time.Since(t0))
			}
		}
	}
	tp := make([][]time.Duration, n)
	for i := range tpRuns {
		for j := range n {
			k := (i + j) % n
			t0 := time.Now()
			if err := sessionThroughput(ss[k]); err != nil {
				t.Fatal(err)
			}
			tp[k] = append(tp[k], time.Since(t0))
		}
	}
	sp := make([][]time.Duration, n)
	for i := range spawns {
		for j := range n {
			k := (i + j) % n
			t0 := time.Now()
			s := startSandboxed(t, e, vs[k])
			sp[k] = append(sp[k], time.Since(t0))
			s.Close()
		}
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, %d CPUs (nproc), %s %s/%s, Landlock ABI %d, load average before: %s\n\n", time.Now().Format("2006-01-02"),
		runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, sandbox.ABI(), loadAvg)
	fmt.Fprintf(&out, "| variant | round trip p50 | p99 | p50 / plain | throughput MB/s (median of %d) | / plain | median of the rounds' ratios | spawn p50 (of %d) | p99 | spawn / plain |\n", tpRuns, spawns)
	fmt.Fprintf(&out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	mbps := func(d time.Duration) float64 { return payloadBytes / d.Seconds() / 1e6 }
	for k, v := range vs {
		p50 := percentile(rt[k], 50)
		// Throughput swings between runs on a shared VM; the ratio within each
		// round (runs next to each other) is steadier than the ratio of medians.
		var ratios []time.Duration // ratio × 1e6, to reuse percentile
		for i := range tp[k] {
			ratios = append(ratios, time.Duration(float64(tp[0][i])/float64(tp[k][i])*1e6))
		}
		fmt.Fprintf(&out, "| %s | %.0f µs | %.0f µs | %.2f× | %.0f | %.2f | %.2f | %.1f ms | %.1f ms | %.2f× |\n", v.name,
			micros(p50), micros(percentile(rt[k], 99)), float64(p50)/float64(percentile(rt[0], 50)),
			mbps(percentile(tp[k], 50)), mbps(percentile(tp[k], 50))/mbps(percentile(tp[0], 50)), float64(percentile(ratios, 50))/1e6,
			micros(percentile(sp[k], 50))/1000, micros(percentile(sp[k], 99))/1000,
			float64(percentile(sp[k], 50))/float64(percentile(sp[0], 50)))
	}
	fmt.Print(out.String())
}
