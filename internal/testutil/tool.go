package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// StrictEnv names the environment variable that turns a missing tool or privilege
// into a test failure: with FLEETMUX_TEST_STRICT=1 (as .ci/run sets it) nothing is
// skipped for want of zsh, tmux, vim, asciinema, OpenSSH, ip or root.
const StrictEnv = "FLEETMUX_TEST_STRICT"

// Strict reports whether FLEETMUX_TEST_STRICT=1.
func Strict() bool { return os.Getenv(StrictEnv) == "1" }

// Missing ends the test for want of what (a tool or a privilege, named in the
// message): it skips, or fails under FLEETMUX_TEST_STRICT=1. Use NeedTool or NeedRoot
// when the test cannot start without it; call Missing with a driver's own error when
// the lookup is the driver's.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Strict() {
		t.Fatalf("missing: %s (%s=1 makes this a failure)", msg, StrictEnv)
	}
	t.Skipf("skipped, missing: %s (set %s=1 to make this a failure)", msg, StrictEnv)
}

// NeedTool returns the path of the program name the test drives, or ends the test
// (Missing) when name is not in PATH.
func NeedTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s not found in PATH", name)
	}
	return p
}

// WantTool is for tests that cover more when a program is there: it returns its
// path, or "" after logging that the part needing name is left out. Under
// FLEETMUX_TEST_STRICT=1 a missing program fails the test instead.
func WantTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		leaveOut(t, fmt.Sprintf("%s not found in PATH", name))
		return ""
	}
	return p
}

// NeedRoot ends the test (Missing) unless it runs as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root (running as uid %d)", os.Geteuid())
	}
}

// WantRoot is WantTool for root: it reports whether the test runs as root, logging
// what is left out when not. Under FLEETMUX_TEST_STRICT=1 not being root fails the
// test instead.
func WantRoot(t testing.TB) bool {
	t.Helper()
	if os.Geteuid() == 0 {
		return true
	}
	leaveOut(t, fmt.Sprintf("root (running as uid %d)", os.Geteuid()))
	return false
}

// leaveOut logs that the part of the test needing what is left out, or fails the
// test under FLEETMUX_TEST_STRICT=1.
func leaveOut(t testing.TB, what string) {
	t.Helper()
	if Strict() {
		t.Fatalf("missing: %s (%s=1 makes this a failure)", what, StrictEnv)
	}
	t.Logf("missing: %s: the part of this test that needs it is left out", what)
}
