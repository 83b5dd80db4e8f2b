package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/session"
)

// TestMain runs the tests, then checks that they left no holder (checkHolders) and
// no goroutine behind (as testutil.MainWithLeakCheck). With FLEETMUX_TEST_MAIN=1 the binary is fleetmux instead (the
// holders that dev and node launch run it as `holder`); TestMain sets that for
// every process the tests start.
func TestMain(m *testing.M) {
	// A claude agent's hooks run this binary as `agent-hook DIR` from the
	// agent's environment, which keeps no FLEETMUX_ variable: never the tests.
	if os.Getenv(envTestMain) == "1" || len(os.Args) > 1 && os.Args[1] == "agent-hook" {
		main()
	}
	if err := os.Setenv(envTestMain, "1"); err != nil {
		panic(err)
	}
	code := m.Run()
	if err := checkHolders(); err != nil { // first: a holder's launcher waits for it
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		code = 1
	}
	if code == 0 {
		if leaked := testutil.LeakCheck(5 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %d goroutines leaked after the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// needBash skips (or, under CI, fails) without bash, and gives the test an empty HOME
// so that the machine's own rc files (slow plugin managers, stale locks) stay out.
func needBash(t *testing.T) {
	t.Helper()
	testutil.NeedTool(t, "bash")
	t.Setenv("HOME", t.TempDir())
}

func runArgs(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	err = run(ctx, args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestTry(t *testing.T) {
	needBash(t)
	dir := t.TempDir()
	out, errs, err := runArgs(t, "try", "--cwd", dir, "--", "echo hi", "(exit 3)")
	if got := exitCode(err); got != 3 {
		t.Errorf("exit code %d (err %v), want 3", got, err)
	}
	var rep bytes.Buffer
	report(&rep, err)
	if rep.Len() != 0 || errs != "" {
		t.Errorf("a failing last command printed errors: %q %q", rep.String(), errs)
	}
	want := regexp.MustCompile(`^\[1\] \$ echo hi  \(exit 0, [0-9.]+(µs|ms|s), ` + regexp.QuoteMeta(dir) + `\)\n` +
		`hi\n` +
		`\[2\] \$ \(exit 3\)  \(exit 3, [0-9.]+(µs|ms|s), ` + regexp.QuoteMeta(dir) + `\)\n$`)
	if !want.MatchString(out) {
		t.Errorf("output:\n%s\nwant it to match %s", out, want)
	}
}

func TestTryJSON(t *testing.T) {
	needBash(t)
	out, _, err := runArgs(t, "try", "--json", "--cwd", t.TempDir(), "--", "echo hi", "cd /", "false")
	if got := exitCode(err); got != 1 {
		t.Errorf("exit code %d (err %v), want 1", got, err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 JSON lines, got %d:\n%s", len(lines), out)
	}
	want := []struct {
		cmd, text, cwd string
		exit           int
	}{{"echo hi", "hi", "", 0}, {"cd /", "", "", 0}, {"false", "", "/", 1}}
	for i, l := range lines {
		var r session.Result
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, l)
		}
		w := want[i]
		b := r.Block
		if b.N != i+1 || b.Command != w.cmd || b.State != session.BlockDone || b.ExitCode == nil || *b.ExitCode != w.exit || r.Text != w.text {
			t.Errorf("line %d: %s\nwant block %d %q done, exit %d, text %q", i+1, l, i+1, w.cmd, w.exit, w.text)
		}
		if w.cwd != "" && b.Cwd != w.cwd {
			t.Errorf("line %d: cwd %q, want %q", i+1, b.Cwd, w.cwd)
		}
		if r.Session.Shell != "bash" || r.Session.ID != "try" {
			t.Errorf("line %d: session %+v", i+1, r.Session)
		}
	}
}

func TestTryTimeout(t *testing.T) {
	needBash(t)
	out, _, err := runArgs(t, "try", "--timeout", "300ms", "--cwd", t.TempDir(), "--", "sleep 30", "echo never")
	if got := exitCode(err); got != 124 || !strings.Contains(err.Error(), "still running after 300ms") {
		t.Errorf("exit code %d, err %v; want 124 and still running", got, err)
	}
	if !strings.HasPrefix(out, "[1] $ sleep 30  (running after ") || strings.Contains(out, "never") {
		t.Errorf("output %q", out)
	}
}

func TestTryInterrupted(t *testing.T) {
	needBash(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	var out, errb bytes.Buffer
	err := run(ctx, []string{"try", "--cwd", t.TempDir(), "--", "sleep 30"}, &out, &errb)
	if got := exitCode(err); got != 130 || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("exit code %d, err %v; want 130, interrupted", got, err)
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"try", "--shell", "fish", "--", "x"}, `try: --shell "fish": want bash or zsh`},
		{[]string{"try"}, "try: no command given: use fleetmux try -- CMD [CMD...]"},
		{[]string{"try", "--", "echo", " "}, "try: command 2 is empty"},
		{[]string{"try", "--timeout", "0s", "--", "x"}, "try: --timeout 0s: want a positive duration"},
		{[]string{"try", "--timeout", "soon", "--", "x"}, `try: invalid argument "soon" for "--timeout"`},
		{[]string{"try", "--bogus"}, "try: unknown flag: --bogus (see fleetmux try --help)"},
		{[]string{"holder", "--data", "x", "--idle-exit", "-1s"}, "holder: --idle-exit -1s: want 0 (never) or a positive duration"},
		{[]string{"--bogus"}, "unknown flag: --bogus (see fleetmux --help)"},
		{[]string{"bogus"}, `unknown command "bogus"`},
	}
	for _, tt := range tests {
		out, errs, err := runArgs(t, tt.args...)
		if err == nil || exitCode(err) == 0 {
			t.Errorf("%q: err %v, exit code %d; want an error", tt.args, err, exitCode(err))
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %q, want it to contain %q", tt.args, err, tt.want)
		}
		if out != "" || errs != "" {
			t.Errorf("%q: printed %q %q; errors are reported once, by main", tt.args, out, errs)
		}
		var rep bytes.Buffer
		report(&rep, err)
		if got := rep.String(); got != "fleetmux: "+err.Error()+"\n" {
			t.Errorf("%q: report printed %q", tt.args, got)
		}
	}
}

func TestBadCwd(t *testing.T) {
	needBash(t)
	_, _, err := runArgs(t, "try", "--cwd", "/nonexistent/dir", "--", "echo")
	if !errors.Is(err, session.ErrBadCwd) || exitCode(err) != 1 {
		t.Errorf("err %v (exit %d), want ErrBadCwd, exit 1", err, exitCode(err))
	}
}

func TestVersion(t *testing.T) {
	out, _, err := runArgs(t, "version")
	if err != nil || !regexp.MustCompile(`^fleetmux \S+ \(protocol 1, go`).MatchString(out) {
		t.Errorf("version: %q, %v", out, err)
	}
}

func TestExitCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		code int
	}{
		{nil, 0},
		{errors.New("x"), 1},
		{&exitError{code: 7}, 7},
		{usageError("bad"), 2},
		{errors.Join(errors.New("a"), &exitError{code: 5}), 5},
	} {
		if got := exitCode(tt.err); got != tt.code {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.code)
		}
	}
}
