package bench

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/digest"
)

// The exec and digest benchmarks: the same in-process stack as the controller
// benchmarks (embedded NATS with JetStream, node agents, the controller's HTTP API on
// loopback, a keep-alive client).

// apiExec is `fleetmux exec n1 -- true` at the HTTP level: POST /v1/exec, and check
// the process exited 0.
func (s *ctlStack) apiExec(node string) error {
	var r api.ExecResult
	if err := s.do("POST", "/v1/exec", api.ExecRequest{Node: node, Argv: []string{"true"}, TimeoutMS: int(opTimeout / time.Millisecond)}, &r); err != nil {
		return err
	}
	if r.State != api.ExecDone || r.ExitCode == nil || *r.ExitCode != 0 {
		return fmt.Errorf("exec on %s: %s, exit code %v", node, r.State, r.ExitCode)
	}
	return nil
}

// BenchmarkExecVsRun: exec of `true` (POST /v1/exec: a process without a PTY)
// side by side with run of `true` in a bash session (POST …/run), on one stack,
// one of each per iteration in alternating order so noise hits both alike.
// Reports each one's p50/p99 and exec-p50 / run-p50. "idle20ms" pauses 20 ms
// (untimed) before each pair, as between an agent's calls: the node's spare
// sandbox wrapper (started after each sandboxed exec) is ready by then.
func BenchmarkExecVsRun(b *testing.B) {
	for _, gap := range []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond} {
		name := "back-to-back"
		if gap > 0 {
			name = fmt.Sprintf("idle%dms", gap/time.Millisecond)
		}
		b.Run(name, func(b *testing.B) { benchExecVsRun(b, gap) })
	}
}

func benchExecVsRun(b *testing.B, gap time.Duration) {
	s := startCtlStack(b, newBenchEnv(b), 1)
	run := s.startAPISession(b)
	exec := func() error { return s.apiExec("n1") }
	if err := exec(); err != nil { // warm-up, untimed
		b.Fatal(err)
	}
	var dr, de []time.Duration
	i := 0
	for b.Loop() {
		time.Sleep(gap) // in ns/op; not in the percentiles
		ops := []func() error{run, exec}
		if i%2 == 1 {
			ops[0], ops[1] = exec, run
		}
		for j, op := range ops {
			t0 := time.Now()
			if err := op(); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			if (i%2 == 0) == (j == 0) {
				dr = append(dr, d)
			} else {
				de = append(de, d)
			}
		}
		i++
	}
	b.ReportMetric(micros(percentile(dr, 50)), "run-p50-µs")
	b.ReportMetric(micros(percentile(dr, 99)), "run-p99-µs")
	b.ReportMetric(micros(percentile(de, 50)), "exec-p50-µs")
	b.ReportMetric(micros(percentile(de, 99)), "exec-p99-µs")
	b.ReportMetric(float64(percentile(de, 50))/float64(percentile(dr, 50)), "exec/run")
}

// Digest fleet: 4 nodes × 25 bash sessions, 100 commands each (every 10th round
// fails): 10,000 real blocks since the cursor.
const (
	digestNodes    = 4
	digestPerNode  = 25
	digestRounds   = 100
	digestFailEach = 10
)

// BenchmarkDigest: GET /v1/digest (fleet scope, the default 2000-token budget) over
// a fleet of 100 sessions whose 10,000 commands all finished since the cursor. The
// blocks are real: each round is one fan-out (POST /v1/run) of `true` (or `false`)
// to the 100 sessions. Reports p50/p99 in ms.
func BenchmarkDigest(b *testing.B) {
	s := startCtlStack(b, newBenchEnv(b), digestNodes)
	since := api.DigestCursor(time.Now())
	targets := s.fanoutSessions(b, digestNodes, digestPerNode)
	for r := range digestRounds {
		cmd := "true"
		if r%digestFailEach == digestFailEach-1 {
			cmd = "false"
		}
		var out api.Fanout
		if err := s.do("POST", "/v1/run", api.FanoutRequest{Selector: api.Selector{Sessions: targets}, Command: cmd, TimeoutMS: 60_000}, &out); err != nil {
			b.Fatal(err)
		}
		if len(out.Results) != len(targets) {
			b.Fatalf("round %d: %d results for %d sessions", r, len(out.Results), len(targets))
		}
	}
	path := "/v1/digest?since=" + url.QueryEscape(since)
	var d api.Digest
	if err := s.do("GET", path, nil, &d); err != nil { // and check what it holds, untimed
		b.Fatal(err)
	}
	blocks := len(targets) * digestRounds
	wantFailed := len(targets) * (digestRounds / digestFailEach)
	if d.Failed != wantFailed || d.Succeeded != blocks-wantFailed || len(d.Unavailable) > 0 {
		b.Fatalf("digest of %d blocks: failed %d, succeeded %d, unavailable %v; want %d failed", blocks, d.Failed, d.Succeeded, d.Unavailable, wantFailed)
	}
	if d.Tokens > d.BudgetTokens*11/10 {
		b.Fatalf("digest of %d tokens, budget %d", d.Tokens, d.BudgetTokens)
	}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := s.do("GET", path, nil, &d); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.ReportMetric(float64(blocks), "blocks")
	b.ReportMetric(percentile(ds, 50).Seconds()*1000, "p50-ms")
	b.ReportMetric(percentile(ds, 99).Seconds()*1000, "p99-ms")
}

// BenchmarkDigestBuild: package digest alone (no nodes, no NATS) over a synthetic
// snapshot of the same size: 100 sessions, 10,000 finished blocks since the
// cursor, one in ten failed with output.
func BenchmarkDigestBuild(b *testing.B) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	snap := digest.Snapshot{Scope: api.ScopeFleet, Since: t0, At: t0.Add(time.Hour), Texts: map[string]string{}}
	for i := range digestNodes * digestPerNode {
		node := fmt.Sprintf("n%d", i%digestNodes+1)
		ses := digest.Session{Session: api.Session{ID: fmt.Sprintf("s%d", i), Node: node, Shell: "bash", State: api.StateIdle, CreatedAt: t0}}
		for n := 1; n <= digestRounds; n++ {
			code := 0
			if n%digestFailEach == 0 {
				code = 1
			}
			start := t0.Add(time.Duration(i*digestRounds+n) * 300 * time.Millisecond)
			end := start.Add(2 * time.Millisecond)
			ses.Blocks = append(ses.Blocks, api.Block{N: n, Command: fmt.Sprintf("make test-%d", n), Cwd: "/srv/app", State: api.BlockDone,
				ExitCode: &code, StartedAt: start, FinishedAt: &end})
			if code != 0 && len(snap.Texts) < 20 {
				snap.Texts[digest.Pointer(node, ses.ID, n)] = "FAIL: TestSomething (0.01s)\n    x_test.go:12: want 1, got 2\nFAIL\nexit status 1\n"
			}
		}
		snap.Sessions = append(snap.Sessions, ses)
	}
	var d api.Digest
	for b.Loop() {
		d = digest.Build(snap, api.DefaultDigestTokens)
	}
	if d.Failed+d.Succeeded != digestNodes*digestPerNode*digestRounds {
		b.Fatalf("digest counted %d failed, %d succeeded", d.Failed, d.Succeeded)
	}
}
