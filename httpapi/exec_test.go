package httpapi_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestExec: POST /v1/exec runs a process without a terminal on a node: stdout
// and stderr come back apart and whole, exit codes and signals as they are, a
// timeout returns the output so far (the process killed), 20 MB is cut to head
// and tail with counts, and a selector gives one result per node.
func TestExec(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": {"role": "web"}, "n2": {"role": "web"}, "n3": {"role": "db"}}})
	exec := func(req api.ExecRequest) api.ExecResult {
		t.Helper()
		var res api.ExecResult
		f.Must(200, "POST", "/v1/exec", req, &res)
		if res.State != api.ExecDone || res.ExitCode == nil || res.Node != req.Node || res.ExecID == "" {
			t.Fatalf("exec %v: %+v", req.Argv, res)
		}
		return res
	}

	script := `for i in $(seq 1 300); do echo "out $i"; echo "err $i" >&2; done; echo "$TERM"; cat`
	res := exec(api.ExecRequest{Node: "n1", Command: script})
	var wantOut, wantErr strings.Builder
	for i := 1; i <= 300; i++ {
		wantOut.WriteString("out " + strconv.Itoa(i) + "\n")
		wantErr.WriteString("err " + strconv.Itoa(i) + "\n")
	}
	wantOut.WriteString("dumb\n")
	if res.Stdout != wantOut.String() || res.Stderr != wantErr.String() || *res.ExitCode != 0 || res.StdoutOmitted != 0 {
		t.Errorf("interleaved streams: stdout %d bytes (want %d), stderr %d bytes (want %d), exit %d", len(res.Stdout), wantOut.Len(), len(res.Stderr), wantErr.Len(), *res.ExitCode)
	}
	stdin := "from stdin\n"
	if res := exec(api.ExecRequest{Node: "n1", Argv: []string{"cat"}, Stdin: &stdin}); res.Stdout != stdin {
		t.Errorf("stdin: %q", res.Stdout)
	}

	for _, c := range []struct {
		cmd    string
		code   int
		signal string
	}{{"exit 0", 0, ""}, {"exit 1", 1, ""}, {"exit 137", 137, ""}, {"kill -KILL $$", 137, "SIGKILL"}} {
		if res := exec(api.ExecRequest{Node: "n2", Argv: []string{"sh", "-c", c.cmd}}); *res.ExitCode != c.code || res.Signal != c.signal {
			t.Errorf("%q: exit %d signal %q, want %d %q", c.cmd, *res.ExitCode, res.Signal, c.code, c.signal)
		}
	}

	res = exec(api.ExecRequest{Node: "n1", Command: "echo before; echo oops >&2; sleep 30; echo after", TimeoutMS: 500})
	if !res.TimedOut || res.Stdout != "before\n" || res.Stderr != "oops\n" || res.Signal != "SIGKILL" || res.DurationMS > 10000 {
		t.Errorf("timeout: %+v", res)
	}

	res = exec(api.ExecRequest{Node: "n1", Command: "head -c 20971520 /dev/zero | tr '\\0' x; echo; echo END"})
	if res.StdoutBytes != 20971520+5 || res.StdoutOmitted <= 0 || !strings.HasSuffix(res.Stdout, "END\n") ||
		!strings.HasPrefix(res.Stdout, "xxxx") || len(res.Stdout) > api.DefaultExecOutputBytes+64 {
		t.Errorf("20 MB: %d bytes, %d omitted, %d in the reply", res.StdoutBytes, res.StdoutOmitted, len(res.Stdout))
	}

	var fan api.ExecFanout
	f.Must(200, "POST", "/v1/exec", api.ExecRequest{Selector: &api.Selector{All: true}, Argv: []string{"sh", "-c", "echo hi; exit 3"}}, &fan)
	nodes := map[string]bool{}
	for _, r := range fan.Results {
		if r.Error != nil || r.ExitCode == nil || *r.ExitCode != 3 || r.Stdout != "hi\n" {
			t.Errorf("fan-out result %+v", r)
		}
		nodes[r.Node] = true
	}
	if len(fan.Results) != 3 || len(nodes) != 3 || fan.Failed != 3 {
		t.Errorf("fan-out to 3 nodes: %+v", fan)
	}
	f.Must(200, "POST", "/v1/exec", api.ExecRequest{Selector: &api.Selector{Labels: map[string]string{"role": "web"}}, Argv: []string{"true"}}, &fan)
	if len(fan.Results) != 2 || fan.OK != 2 {
		t.Errorf("fan-out to role=web: %+v", fan)
	}

	// A background exec outlives its request's timeout and is found by its id.
	dir := t.TempDir()
	var bg api.ExecResult
	f.Must(200, "POST", "/v1/exec", api.ExecRequest{Node: "n2", Background: true, TimeoutMS: 1,
		Command: "echo first; echo e1 >&2; while [ ! -e " + dir + "/go ]; do sleep 0.02; done; echo second; exit 4"}, &bg)
	if bg.State != api.ExecRunning || bg.ExitCode != nil || bg.TimedOut {
		t.Fatalf("background exec: %+v", bg)
	}
	xp := "/v1/exec/n2/" + bg.ExecID
	var o api.ExecOutput
	testutil.Eventually(t, 10*time.Second, func() bool {
		f.Must(200, "GET", xp+"/output?stream=stdout", nil, &o)
		return o.Data == "first\n"
	}, "the background exec's first line")
	if o.Offset != 0 || o.Next != 6 || o.End != 6 || o.Done {
		t.Errorf("output: %+v", o)
	}
	f.Must(200, "GET", xp+"?max_output_bytes=100", nil, &bg)
	if bg.State != api.ExecRunning || bg.Stderr != "e1\n" {
		t.Errorf("get while running: %+v", bg)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f.Must(200, "GET", xp+"/wait?timeout_ms=10000", nil, &bg)
	if bg.State != api.ExecDone || bg.ExitCode == nil || *bg.ExitCode != 4 || bg.Stdout != "first\nsecond\n" {
		t.Errorf("wait: %+v", bg)
	}
	f.Must(200, "GET", xp+"/output?stream=stdout&from=6", nil, &o)
	if o.Data != "second\n" || o.Offset != 6 || !o.Done {
		t.Errorf("output from 6: %+v", o)
	}
	// DELETE ends a running one with its process group.
	f.Must(200, "POST", "/v1/exec", api.ExecRequest{Node: "n2", Background: true, TimeoutMS: 1, Command: "sleep 60"}, &bg)
	f.Must(200, "DELETE", "/v1/exec/n2/"+bg.ExecID, nil, &bg)
	if bg.State != api.ExecDone || bg.Signal != "SIGKILL" {
		t.Errorf("delete: %+v", bg)
	}

	f.APIErr(400, api.CodeBadRequest, "POST", "/v1/exec", api.ExecRequest{Node: "n1", Argv: []string{"/no/such/program"}})
	f.APIErr(400, api.CodeBadRequest, "POST", "/v1/exec", api.ExecRequest{Node: "n1", Argv: []string{"true"}, Command: "true"})
	f.APIErr(404, api.CodeNotFound, "GET", "/v1/exec/n1/x000000000000", nil)
}

// TestExecPolicy: an exec is decided by the policy before it starts (a denied
// argv or command never runs), an approve rule refuses it (approvals are for
// sessions), its output is redacted, and it is audited with its principal.
func TestExecPolicy(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Policy: true, Store: true})
	_, audit := testutil.AuditSub(t, f.NATS.ClientURL(), "n1")
	f.setPolicyEverywhere(t, `version: 1
rules:
  - name: no-touch
    match: {command: '(^|\s)touch\s'}
    action: deny
  - name: ask-for-rm
    match: {command: '(^|\s)rm\s'}
    action: approve
  - name: default
    action: allow
redact:
  - {name: key, pattern: 'SECRET[0-9]{6}'}
`)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	for _, req := range []api.ExecRequest{
		{Node: "n1", Argv: []string{"touch", marker}},
		{Node: "n1", Command: "touch " + marker},
		{Node: "n1", Argv: []string{"bash", "-c", "true; touch " + marker}},
	} {
		e := f.APIErr(403, api.CodeDenied, "POST", "/v1/exec", req)
		if e.Rule != "no-touch" {
			t.Errorf("%+v: rule %q", req, e.Rule)
		}
		if r := testutil.NextAudit(t, audit, api.VerbExec); r.Decision != api.ActionDeny || r.Principal == "" {
			t.Errorf("audit of a denied exec: %+v", r)
		}
	}
	if markerThere(marker) {
		t.Fatal("a denied exec ran")
	}
	e := f.APIErr(403, api.CodeDenied, "POST", "/v1/exec", api.ExecRequest{Node: "n1", Argv: []string{"rm", "-f", marker}})
	if e.Rule != "ask-for-rm" || !strings.Contains(e.Message, "approvals are for sessions") {
		t.Errorf("approve rule: %+v", e)
	}
	testutil.NextAudit(t, audit, api.VerbExec)

	var res api.ExecResult
	f.Must(200, "POST", "/v1/exec", api.ExecRequest{Node: "n1", Command: "echo key SECRET123456; echo SECRET654321 >&2"}, &res)
	if strings.Contains(res.Stdout+res.Stderr, "SECRET") || !strings.Contains(res.Stdout, "[REDACTED:key]") {
		t.Errorf("not redacted: %q %q", res.Stdout, res.Stderr)
	}
	r := testutil.NextAudit(t, audit, api.VerbExec)
	if r.Decision != api.ActionAllow || r.Principal != "token:bootstrap" && r.Principal == "" || strings.Contains(r.Detail, "SECRET") {
		t.Errorf("audit of an exec: %+v", r)
	}

	// Only its owner (or an admin) ends a background exec; a viewer runs none.
	alice := f.newToken("alice", api.RoleOperator, "")
	bob := f.newToken("bob", api.RoleOperator, "")
	viewer := f.newToken("watcher", api.RoleViewer, "")
	var bg api.ExecResult
	f.as(alice, func() {
		f.Must(200, "POST", "/v1/exec", api.ExecRequest{Node: "n1", Background: true, TimeoutMS: 1, Command: "sleep 60"}, &bg)
	})
	xp := "/v1/exec/n1/" + bg.ExecID
	f.as(bob, func() {
		if e := f.APIErr(403, api.CodeForbidden, "DELETE", xp, nil); !strings.Contains(e.Message, "token:alice") {
			t.Errorf("bob's kill refused without naming the owner: %s", e.Message)
		}
	})
	f.as(viewer, func() {
		f.APIErr(403, api.CodeForbidden, "POST", "/v1/exec", api.ExecRequest{Node: "n1", Argv: []string{"touch", marker + "v"}})
		f.APIErr(403, api.CodeForbidden, "DELETE", xp, nil)
	})
	f.Must(200, "GET", xp, nil, &bg)
	if bg.State != api.ExecRunning {
		t.Fatalf("refused kills ended it: %+v", bg)
	}
	f.as(alice, func() { f.Must(200, "DELETE", xp, nil, &bg) })
	if bg.State != api.ExecDone || markerThere(marker+"v") {
		t.Errorf("owner's kill: %+v", bg)
	}
}
