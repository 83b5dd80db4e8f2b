// Package testutil holds helpers shared by the tests (never by non-test code):
// condition waits with deadlines, goroutine leak checks, an embedded NATS server,
// a Buffer safe for concurrent use, and lookups of the real programs the tests drive
// (skips that name a missing tool, failures under FLEETMUX_TEST_STRICT=1).
package testutil

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it returns true, failing the test
// with msg when timeout passes first. It is the way to wait in tests: never sleep.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, fmt.Sprintf(msg, args...))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// goroutines returns the stacks of all goroutines except the caller's.
func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	gs := strings.Split(string(buf), "\n\n")
	return gs[1:] // the first is the caller
}

// Goroutines returns the stacks of the goroutines (the caller's excepted) with a
// frame, or a creator, whose name contains any of match (e.g. a package path
// "github.com/fleetmux/fleetmux/session."): what a test counts as some code's own.
func Goroutines(match ...string) []string {
	var out []string
	for _, g := range goroutines() {
		for _, m := range match {
			if strings.Contains(g, m) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// benign goroutines belong to the runtime or the test framework.
var benign = []string{
	"testing.(*M).", "testing.tRunner", "testing.runTests", "testing.(*T).Run",
	"runtime.goexit", "os/signal.signal_recv", "os/signal.loop",
	"runtime.ensureSigM", "created by runtime.gc", "runtime.MHeap_Scavenger",
	"testing.(*F).", "internal/fuzz.", "testing.runFuzzing", "runtime/trace.",
}

func isBenign(g string) bool {
	if strings.Contains(g, "goroutine 1 [") {
		return true
	}
	// x/crypto/ssh's NewSession on an ended connection never returns (see
	// SSHSession, which gives up on it)
	if strings.Contains(g, "golang.org/x/crypto/ssh.(*mux).openChannel") && strings.Contains(g, "testutil.SSHSession.func1") {
		return true
	}
	// keep only goroutines whose top frames are ours or libraries'
	for _, b := range benign {
		if strings.Contains(g, b) && !strings.Contains(g, "github.com/fleetmux/") {
			return true
		}
	}
	return false
}

// LeakCheck returns the goroutines (stacks) still running after waiting up to timeout
// for them to finish. Use it from TestMain after m.Run, when every test has cleaned up.
func LeakCheck(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var leaked []string
		for _, g := range goroutines() {
			if !isBenign(g) {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// MainWithLeakCheck runs the tests and then fails the binary if goroutines leaked.
func MainWithLeakCheck(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := LeakCheck(5 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %d goroutines leaked after the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}
