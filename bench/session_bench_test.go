package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// BenchmarkRoundTrip measures submitting a trivial command and learning that it is
// done, per iteration, reporting the p50 and p99 latency.
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("session", func(b *testing.B) {
		s := startSession(b, newBenchEnv(b))
		benchLatency(b, func() error {
			_, err := sessionRun(s, "true", opTimeout)
			return err
		})
	})
	b.Run("rawpty", func(b *testing.B) {
		r, err := startRawPTY(newBenchEnv(b))
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		benchLatency(b, r.roundTrip)
	})
	b.Run("rawpty+hooks", func(b *testing.B) {
		r, err := startRawHooks(newBenchEnv(b))
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		benchLatency(b, r.hooksRoundTrip)
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
}

func benchLatency(b *testing.B, op func() error) {
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.ReportMetric(micros(percentile(ds, 50)), "p50-µs")
	b.ReportMetric(micros(percentile(ds, 99)), "p99-µs")
}

// BenchmarkThroughput measures a command printing payloadBytes of lines, from
// submission until all its output has been read; MB/s is of the payload.
func BenchmarkThroughput(b *testing.B) {
	b.Run("session", func(b *testing.B) {
		s := startSession(b, newBenchEnv(b))
		b.SetBytes(payloadBytes)
		for b.Loop() {
			if err := sessionThroughput(s); err != nil {
				b.Fatal(err)
			}
			// The screen emulator is attached all along; show it, untimed.
			b.StopTimer()
			if err := checkScreen(s); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("session+screen", func(b *testing.B) {
		s := startSession(b, newBenchEnv(b))
		b.SetBytes(payloadBytes)
		for b.Loop() {
			if err := sessionThroughput(s); err != nil {
				b.Fatal(err)
			}
			if err := checkScreen(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rawpty", func(b *testing.B) {
		r, err := startRawPTY(newBenchEnv(b))
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		b.SetBytes(payloadBytes)
		for b.Loop() {
			if err := rawThroughput(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func rawThroughput(r *rawPTY) error {
	n, err := r.throughput()
	if err == nil && n < payloadBytes {
		err = fmt.Errorf("raw pty: read %d bytes, want >= %d", n, payloadBytes)
	}
	return err
}

// TestBenchReport runs every variant for a fixed count, interleaved (in rotating
// order: ABC BCA CAB ...) so machine noise hits all alike, and prints the markdown
// table of README.md.
func TestBenchReport(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the side-by-side benchmark report (about a minute)")
	}
	rounds := envInt(t, "FLEETMUX_BENCH_ROUNDS", 300)
	tpRuns := envInt(t, "FLEETMUX_BENCH_TP_RUNS", 3)
	loadAvg := loadAverage() // other work on the machine skews absolute numbers
	e := newBenchEnv(t)

	s := startSession(t, e)
	hs := startHeldSession(t, e)
	r, err := startRawPTY(e)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	type variant struct {
		name string
		op   func() error
		ds   []time.Duration
	}
	h, err := startRawHooks(e)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rt := []*variant{
		{name: "session", op: func() error { _, err := sessionRun(s, "true", opTimeout); return err }},
		{name: "session+holder", op: func() error { _, err := sessionRun(hs, "true", opTimeout); return err }},
		{name: "rawpty", op: r.roundTrip},
		{name: "rawpty+hooks", op: h.hooksRoundTrip},
	}
	tm, err := startTmux(e, t.TempDir())
	switch {
	case errors.Is(err, errNoTmux):
		t.Log("tmux not installed: no tmux row")
	case err != nil:
		t.Fatal(err)
	default:
		defer tm.Close()
		rt = append(rt, &variant{name: "tmux", op: tm.roundTrip})
	}

	const warmup = 20
	for i := range warmup + rounds {
		for j := range rt {
			// Rotate the order (ABC, BCA, CAB, ...): each variant follows each other
			// equally often, so none always runs in the wake of tmux's trailing work.
			v := rt[(i+j)%len(rt)]
			t0 := time.Now()
			if err := v.op(); err != nil {
				t.Fatal(err)
			}
			if i >= warmup {
				v.ds = append(v.ds, time.Since(t0))
			}
		}
	}

	tp := []*variant{
		{name: "session", op: func() error { return sessionThroughput(s) }},
		{name: "session+holder", op: func() error { return sessionThroughput(hs) }},
		{name: "session+screen", op: func() error {
			if err := sessionThroughput(s); err != nil {
				return err
			}
			return checkScreen(s)
		}},
		{name: "rawpty", op: func() error { return rawThroughput(r) }},
	}
	cpu := make(map[string][]time.Duration) // this process's CPU time per run: the reading side
	for i := range tpRuns {
		for j := range tp {
			v := tp[(i+j)%len(tp)]
			c0 := processCPU()
			t0 := time.Now()
			if err := v.op(); err != nil {
				t.Fatal(err)
			}
			v.ds = append(v.ds, time.Since(t0))
			cpu[v.name] = append(cpu[v.name], processCPU()-c0)
			if v.name == "session" {
				if err := checkScreen(s); err != nil { // untimed
					t.Fatal(err)
				}
			}
		}
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, %d CPUs (nproc), %s %s/%s, %s, %s\n\n", time.Now().Format("2006-01-02"),
		runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, toolVersion("bash", "--version"), toolVersion("tmux", "-V"))
	fmt.Fprintf(&out, "Round trip (`true`), %d interleaved runs each after %d warm-up runs (load average before: %s):\n\n", rounds, warmup, loadAvg)
	fmt.Fprintf(&out, "| variant | p50 | p99 | p50 / rawpty | p99 / rawpty |\n|---|---:|---:|---:|---:|\n")
	byName := func(vs []*variant, name string) *variant {
		for _, v := range vs {
			if v.name == name {
				return v
			}
		}
		t.Fatalf("no variant %s", name)
		return nil
	}
	base := byName(rt, "rawpty")
	for _, v := range rt {
		p50, p99 := percentile(v.ds, 50), percentile(v.ds, 99)
		fmt.Fprintf(&out, "| %s | %.0f µs | %.0f µs | %.2f× | %.2f× |\n", v.name, micros(p50), micros(p99),
			float64(p50)/float64(percentile(base.ds, 50)), float64(p99)/float64(percentile(base.ds, 99)))
	}
	fmt.Fprintf(&out, "\nThroughput (%d MB of 81-byte lines), %d interleaved runs each:\n\n", payloadBytes/1_000_000, tpRuns)
	fmt.Fprintf(&out, "| variant | median MB/s | min–max MB/s | median / rawpty | median of the rounds' ratios | reader CPU per MB (median) | CPU / rawpty's |\n|---|---:|---:|---:|---:|---:|---:|\n")
	mbps := func(d time.Duration) float64 { return payloadBytes / d.Seconds() / 1e6 }
	raw := byName(tp, "rawpty")
	baseTP := mbps(percentile(raw.ds, 50))
	baseCPU := percentile(cpu[raw.name], 50)
	for _, v := range tp {
		med := mbps(percentile(v.ds, 50))
		// The raw PTY's speed swings between runs on a shared VM; the ratio within
		// each round (runs next to each other) is steadier than the ratio of medians.
		var ratios []time.Duration // ratio × 1e6, to reuse percentile
		for i := range v.ds {
			ratios = append(ratios, time.Duration(float64(raw.ds[i])/float64(v.ds[i])*1e6))
		}
		c := percentile(cpu[v.name], 50)
		fmt.Fprintf(&out, "| %s | %.0f | %.0f–%.0f | %.2f | %.2f | %.1f ms | %.2f× |\n", v.name, med, mbps(slices.Max(v.ds)), mbps(slices.Min(v.ds)), med/baseTP,
			float64(percentile(ratios, 50))/1e6, float64(c)/float64(time.Millisecond)/(payloadBytes/1e6), float64(c)/float64(baseCPU))
	}
	fmt.Fprintf(&out, "\nReader CPU: this process's user+system time during the run (the shell, yes and head are other processes), per MB of payload; for session+holder it counts the holder too (it runs in this process here).\n")
	fmt.Print(out.String())
}

// processCPU is the user+system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100 // ceil(len*p/100), 1-based
	return s[max(0, min(len(s)-1, i-1))]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// loadAverage is the 1, 5 and 15 minute load average, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// toolVersion is the first line of `tool flag`, or "tool missing".
func toolVersion(tool, flag string) string {
	out, err := exec.Command(tool, flag).Output()
	if err != nil {
		return tool + " missing"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}
