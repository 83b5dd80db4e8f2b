package main

import (
	"strings"
	"testing"
)

// TestExecCLI: `fleetmux exec NODE -- ARGV` prints the process's stdout on
// stdout and its stderr on stderr and exits like it (as ssh host cmd does); 124
// when its timeout killed it; 255 when fleetmux itself failed.
func TestExecCLI(t *testing.T) {
	addr := startDev(t)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		out, errs, err := runArgs(t, append([]string{"exec", "--addr", addr}, args...)...)
		if err != nil && errs == "" {
			errs = err.Error()
		}
		return out, errs, exitCode(err)
	}
	if out, errs, code := cli("here", "--", "sh", "-c", "echo out; echo err >&2; exit 7"); out != "out\n" || errs != "err\n" || code != 7 {
		t.Errorf("exec: out %q err %q exit %d", out, errs, code)
	}
	if out, _, code := cli("here", "-c", "echo $TERM"); out != "dumb\n" || code != 0 {
		t.Errorf("exec -c: out %q exit %d", out, code)
	}
	if out, errs, code := cli("here", "--timeout", "300ms", "-c", "echo before; sleep 30"); out != "before\n" || code != 124 || !strings.Contains(errs, "killed after") {
		t.Errorf("exec --timeout: out %q err %q exit %d", out, errs, code)
	}
	if _, errs, code := cli("nosuchnode", "--", "true"); code != 255 || !strings.Contains(errs, "nosuchnode") {
		t.Errorf("unknown node: err %q exit %d", errs, code)
	}
	if _, _, code := cli("here"); code == 0 {
		t.Error("exec without a program exited 0")
	}
}
