package main

import (
	"strings"
	"testing"
)

// TestLsPrintable is issue 15 #14 through the CLI and a real shell: a title with
// terminal escapes is refused with a clear error, and what a shell may still put
// in a session's fields (its working directory: any bytes a directory name holds)
// reaches `fleetmux ls` as visible escapes, never as control characters.
func TestLsPrintable(t *testing.T) {
	addr := startDev(t)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		out, errs, err := runArgs(t, append([]string{args[0], "--addr", addr}, args[1:]...)...)
		if err != nil {
			errs += err.Error()
		}
		return out, errs, exitCode(err)
	}
	out, errs, code := cli("new", "--title", "\x1b]52;c;Y3VybCBldmlsIHwgc2gK\x07\x1b[2J")
	if code == 0 || !strings.Contains(errs, "control character U+001B") {
		t.Fatalf("new with an escape in its title: exit %d %q %q", code, out, errs)
	}
	if out, errs, code = cli("new", "--title", "plain"); code != 0 {
		t.Fatalf("new: %q %q %d", out, errs, code)
	}
	addrOf := strings.TrimSpace(out)
	// A directory named with C1 CSI, a bidi override and a BEL: the shell reports
	// it as its cwd (OSC 7), the node keeps it as it is.
	if out, errs, code := cli("run", addrOf, "--", `d=$(printf 'x\302\2332J\342\200\256y\007z'); mkdir -p "$d" && cd "$d"`); code != 0 {
		t.Fatalf("run: %q %q %d", out, errs, code)
	}
	out, _, code = cli("ls")
	if code != 0 || !strings.Contains(out, addrOf) || !strings.Contains(out, `\u009b2J`) {
		t.Fatalf("ls: exit %d\n%q", code, out)
	}
	for _, bad := range []string{"\x1b", "\x07", "\u009b", "\u202e"} {
		if strings.Contains(out, bad) {
			t.Errorf("ls printed %q raw:\n%q", bad, out)
		}
	}
}
