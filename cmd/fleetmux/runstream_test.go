package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// stampedLine is a line of the CLI's stdout and when it arrived.
type stampedLine struct {
	text string
	at   time.Time
}

// runPiped runs the CLI with stdout on a pipe, stamping each line as it arrives.
func runPiped(t *testing.T, args ...string) (lines []stampedLine, stderr string, code int) {
	t.Helper()
	r, w := io.Pipe()
	var errb testutil.Buffer
	done := make(chan error, 1)
	go func() {
		err := runIO(context.Background(), args, strings.NewReader(""), w, &errb)
		w.Close()
		done <- err
	}()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		lines = append(lines, stampedLine{sc.Text(), time.Now()})
	}
	err := <-done
	stderr = errb.String()
	if err != nil {
		stderr += err.Error()
	}
	return lines, stderr, exitCode(err)
}

func texts(lines []stampedLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.text)
	}
	return out
}

// TestRunStreams: `fleetmux run` prints the output as it arrives: with stdout a
// pipe, "start" comes a second or more before "end" exists, and the exit code is
// the command's. --raw gives the raw bytes; --follow keeps following past
// --timeout and exits like the command.
func TestRunStreams(t *testing.T) {
	addr := startDev(t)
	if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil || out != "here/s1\n" {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	lines, errs, code := runPiped(t, "run", "--addr", addr, "here/s1", "--", "echo start; sleep 2; echo end; (exit 3)")
	if code != 3 || strings.Join(texts(lines), "|") != "start|end" {
		t.Fatalf("run: %q exit %d, stderr %q", texts(lines), code, errs)
	}
	if gap := lines[1].at.Sub(lines[0].at); gap < time.Second {
		t.Errorf("start came %v before end: printed at the end, not as it arrived", gap)
	}

	lines, errs, code = runPiped(t, "run", "--addr", addr, "here/s1", "--raw", "--", "printf 'a\\033[1mb\\033[0m\\n'; sleep 1.5; echo c")
	// (the scanner drops CRs; the terminal's own sequences may precede the output)
	if code != 0 || len(lines) != 2 || !strings.HasSuffix(lines[0].text, "a\x1b[1mb\x1b[0m") || lines[1].text != "c" {
		t.Fatalf("run --raw: %q exit %d, stderr %q", texts(lines), code, errs)
	}
	if gap := lines[1].at.Sub(lines[0].at); gap < time.Second {
		t.Errorf("--raw: the first line came %v before the last", gap)
	}

	// Rendered: the escape sequences and a carriage-return overwrite resolved.
	lines, errs, code = runPiped(t, "run", "--addr", addr, "here/s1", "--", "printf 'x\\033[31mred\\033[0m\\n10%%\\r100%%\\n'; sleep 1; echo done")
	if code != 0 || strings.Join(texts(lines), "|") != "xred|100%|done" {
		t.Fatalf("run rendered: %q exit %d, stderr %q", texts(lines), code, errs)
	}

	// --timeout alone: 124 with the output so far; with --follow: to the end.
	lines, errs, code = runPiped(t, "run", "--addr", addr, "here/s1", "--timeout", "500ms", "--", "echo one; sleep 2; echo two")
	if code != 124 || strings.Join(texts(lines), "|") != "one" || !strings.Contains(errs, "still running") {
		t.Fatalf("run --timeout: %q exit %d, stderr %q", texts(lines), code, errs)
	}
	if _, errs, err := runArgs(t, "wait", "--addr", addr, "here/s1", "--until", "idle", "--timeout", "20s"); err != nil {
		t.Fatalf("wait: %q %v", errs, err)
	}
	lines, errs, code = runPiped(t, "run", "--addr", addr, "here/s1", "--timeout", "500ms", "--follow", "--", "echo one; sleep 2; echo two; (exit 5)")
	if code != 5 || strings.Join(texts(lines), "|") != "one|two" {
		t.Fatalf("run --follow: %q exit %d, stderr %q", texts(lines), code, errs)
	}
}

// TestRunHeldWaits: a held command waits for the decision by default, saying on
// stderr where the approval is and how to decide it, then exits like the command;
// --no-wait keeps exit 255.
func TestRunHeldWaits(t *testing.T) {
	addr := startDev(t)
	req, _ := http.NewRequest("PUT", addr+"/v1/policy", strings.NewReader("version: 1\nrules:\n  - name: needs-a-human\n    match: {command: 'needs-ok'}\n    action: approve\n"))
	req.Header.Set("Authorization", "Bearer "+devAdminToken)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/policy: %v %v", err, resp)
	}
	resp.Body.Close()
	if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil || out != "here/s1\n" {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	var errs string
	testutil.Eventually(t, 5*time.Second, func() bool { // the node applies the policy within a second
		_, errs, err = runArgs(t, "run", "--addr", addr, "here/s1", "--no-wait", "--", "true # needs-ok")
		return exitCode(err) == 255 && strings.Contains(fmt.Sprint(err), "here/a1")
	}, "--no-wait: exit 255 naming here/a1 (exit %d %q %v)", exitCode(err), errs, err)

	// An operator runs it; the admin approves.
	op, errs, err := runArgs(t, "token", "create", "--addr", addr, "--name", "op", "--role", "operator")
	if err != nil {
		t.Fatalf("token create: %q %v", errs, err)
	}
	r, w := io.Pipe()
	var errb testutil.Buffer
	done := make(chan error, 1)
	go func() {
		err := runIO(context.Background(), []string{"run", "--addr", addr, "--token", strings.TrimSpace(op), "here/s1", "--", "echo approved-ran; (exit 6) # needs-ok"}, strings.NewReader(""), w, &errb)
		w.Close()
		done <- err
	}()
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	testutil.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(errb.String(), "fleetmux approve here/a2")
	}, "the run to say it waits for here/a2")
	if o, e, err := runArgs(t, "approve", "--addr", addr, "here/a2"); err != nil {
		t.Fatalf("approve: %q %q %v", o, e, err)
	}
	err = <-done
	if got := <-out; exitCode(err) != 6 || got != "approved-ran\n" {
		t.Fatalf("after approval: %q exit %d (%v), stderr %q", got, exitCode(err), err, errb.String())
	}
}

func TestRenderLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{"a\x1b[31mred\x1b[0m", "ared"},
		{"10%\r100%", "100%"},
		{"long line\rab", "abng line"},
		{"abc\bd", "abd"},
		{"x\x1b]0;title\x07y", "xy"},
		{"x\x1b]8;;http://e\x1b\\link\x1b]8;;\x1b\\", "xlink"},
		{"tab\there", "tab     here"},
		{"bell\x07", "bell"},
		{"c1\u009bx", "c1x"},
		{"bad\xffutf8", "bad\ufffdutf8"},
		{"trail   \r", "trail"},
		{"é\rx", "x"},
		{"\x1b(Bascii", "ascii"},
		{"cut\x1b[", "cut"},
	} {
		if got := renderLine([]byte(c.in)); got != c.want {
			t.Errorf("renderLine(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestLineStreamAfterFinish: output the follow delivers after the block's text
// was printed (the run's reply overtook the stream) is not printed again.
func TestLineStreamAfterFinish(t *testing.T) {
	var b strings.Builder
	ls := &lineStream{w: &b, next: 100, echo: []string{"echo still-$((6*7))"}}
	if err := ls.feed(100, []byte("\x1b[?2004h$ echo still-$((6*7))\r\n")); err != nil {
		t.Fatal(err)
	}
	ls.flushRendered("still-42\n")
	if err := ls.feed(131, []byte("still-42\r\n$ ")); err == nil {
		t.Error("feed after the text was printed: no error to end the follow")
	}
	if b.String() != "still-42\n" {
		t.Errorf("printed %q, want the line once", b.String())
	}
}
