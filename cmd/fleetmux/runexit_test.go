package main

import (
	"strings"
	"testing"
)

// TestRunExitStatus: `fleetmux run` exits the way ssh does, and never 0 unless the
// command exited 0: its code; 124 still running at the timeout; 254 finished with
// its code unknown (and stderr says why); 255 fleetmux's own failure.
func TestRunExitStatus(t *testing.T) {
	addr := startDev(t)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		out, errs, err := runArgs(t, append([]string{args[0], "--addr", addr}, args[1:]...)...)
		if err != nil && errs == "" {
			errs = err.Error() // what main reports on stderr
		}
		return out, errs, exitCode(err)
	}
	if out, errs, code := cli("new"); code != 0 || out != "here/s1\n" {
		t.Fatalf("new: %q %q %d", out, errs, code)
	}
	for _, c := range []struct {
		args []string
		code int
		err  string // in stderr
	}{
		{[]string{"here/s1", "--", "true"}, 0, ""},
		{[]string{"here/s1", "--", "(exit 3)"}, 3, ""},
		{[]string{"here/s1", "--", "fi"}, 2, ""}, // bash's own status for a parse error
		{[]string{"here/s1", "--timeout", "300ms", "--", "sleep 30"}, 124, "still running"},
	} {
		if _, errs, code := cli(append([]string{"run"}, c.args...)...); code != c.code || !strings.Contains(errs, c.err) {
			t.Fatalf("run %q: exit %d (stderr %q), want %d", c.args, code, errs, c.code)
		}
	}
	// Stop the sleep, then type into a nested shell without integration: 254.
	if _, errs, code := cli("keys", "here/s1", "C-c"); code != 0 {
		t.Fatalf("keys: %q", errs)
	}
	if _, errs, code := cli("wait", "here/s1", "--until", "idle", "--timeout", "10s"); code != 0 {
		t.Fatalf("wait idle: %q", errs)
	}
	if _, _, code := cli("run", "here/s1", "--timeout", "200ms", "--", "bash --norc --noprofile"); code != 124 {
		t.Fatalf("nested bash: exit %d, want 124 (it runs)", code)
	}
	if _, errs, code := cli("wait", "here/s1", "--until", "waiting_input", "--timeout", "10s"); code != 0 {
		t.Fatalf("wait waiting_input: %q", errs)
	}
	out, errs, code := cli("run", "here/s1", "--", "echo nested; (exit 0)")
	if code != 254 || out != "nested\n" || !strings.Contains(errs, "exit code unknown") || !strings.Contains(errs, "without shell integration") {
		t.Fatalf("typed into a nested shell: exit %d out %q stderr %q; want 254 and why", code, out, errs)
	}
	// The same through a one-target fan-out: not ok, and 254.
	out, _, code = cli("run", "--sessions", "here/s1", "--", "echo again")
	if code != 254 || !strings.Contains(out, "ok=0 failed=1") || !strings.Contains(out, "exit code unknown") {
		t.Fatalf("fan-out with an unknown code: exit %d\n%s", code, out)
	}
	if _, _, code := cli("run", "here/s1", "--", "exit"); code != 254 {
		t.Fatalf("exit of the nested shell: %d", code)
	}
	// fleetmux's own failures: 255, whatever the command would have done.
	for _, args := range [][]string{
		{"run", "nowhere/s1", "--", "true"},   // unknown node
		{"run", "here/s99", "--", "true"},     // unknown session
		{"run", "bad.name/s1", "--", "true"},  // bad address
		{"run", "here/s1", "--bogus", "true"}, // bad flag
		{"run", "here/s1"},                    // no command
	} {
		if _, errs, code := cli(args...); code != 255 || errs == "" {
			t.Fatalf("%q: exit %d (stderr %q), want 255 with a message", args, code, errs)
		}
	}
	_, errs, err := runArgs(t, "run", "--addr", "http://127.0.0.1:1", "here/s1", "--", "true")
	if exitCode(err) != 255 {
		t.Fatalf("unreachable controller: exit %d (%v %q), want 255", exitCode(err), err, errs)
	}
}
