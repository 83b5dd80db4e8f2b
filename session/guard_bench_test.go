package session

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// BenchmarkGuardRoundTrip measures Run("true") in a session whose Guard allows at
// once against one without a Guard, interleaved (one of each per iteration, so a
// machine's changing load hits both alike), per shell: the cost of the shell's own
// check of each line (shell/guard.bash, shell/guard.zsh) and of the guard channel (guard.go).
func BenchmarkGuardRoundTrip(b *testing.B) {
	for _, sh := range shells {
		b.Run(sh, func(b *testing.B) {
			testutil.NeedTool(b, sh)
			allow := func(context.Context, string) GuardVerdict { return GuardVerdict{Allow: true} }
			plain, guarded := benchShell(b, sh, nil), benchShell(b, sh, allow)
			var dp, dg []time.Duration
			run := func(s *Session, ds *[]time.Duration) {
				t0 := time.Now()
				r, err := s.Run(context.Background(), "true", RunOptions{Timeout: 15 * time.Second})
				if err != nil || r.Block.State != BlockDone {
					b.Fatalf("run: %v (%s)", err, r.Block.State)
				}
				*ds = append(*ds, time.Since(t0))
			}
			for b.Loop() {
				run(plain, &dp)
				run(guarded, &dg)
			}
			p50 := func(ds []time.Duration) float64 {
				slices.Sort(ds)
				return float64(ds[len(ds)/2].Microseconds())
			}
			pp, pg := p50(dp), p50(dg)
			b.ReportMetric(pp, "plain-p50-µs")
			b.ReportMetric(pg, "guarded-p50-µs")
			b.ReportMetric(pg/pp, "guarded/plain")
		})
	}
}

func benchShell(b *testing.B, shell string, guard func(context.Context, string) GuardVerdict) *Session {
	home := b.TempDir()
	s, err := Start(Config{
		ID: "b1", Shell: shell, Dir: home,
		BaseEnv:    []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"},
		RuntimeDir: b.TempDir(), Cols: 100, Rows: 30, Guard: guard,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.Run(context.Background(), "true", RunOptions{Timeout: 15 * time.Second}); err != nil {
		b.Fatal(err)
	}
	return s
}
