package httpapi_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// Approvals end to end on the real stack: the policy through PUT /v1/policy, a
// run held at the node, listed and decided through the API by tokens of each role,
// the approved command run once by the node with its real exit code, a denied or
// expired one never, fan-out targets held, and an agent over MCP (the go-sdk's
// client at /mcp) told held, then given the result by wait_for.

// holdPolicy holds commands that mention "needs-ok" (10 minutes) or "quick-ok"
// (a second).
const holdPolicy = `{"version": 1, "rules": [
  {"name": "quick", "match": {"command": "quick-ok"}, "action": "approve", "approve_within": "1s"},
  {"name": "needs-a-human", "match": {"command": "needs-ok"}, "action": "approve"}
]}`

func approvalFixture(t *testing.T) (*fixture, string) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": {"role": "web"}}, Store: true, Policy: true})
	var info api.PolicyInfo
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(holdPolicy), &info)
	agent := f.newToken("agent", api.RoleOperator, "1h")
	// The node applies each version within a second: wait until it holds.
	s := f.NewSession("n1")
	f.as(agent, func() {
		testutil.Eventually(t, 5*time.Second, func() bool {
			code, b := f.Do("POST", "/v1/sessions/n1/"+s.ID+"/run", api.RunBody{Command: "true # needs-ok probe", TimeoutMS: 5000})
			return code == http.StatusConflict && strings.Contains(string(b), `"code":"held"`)
		}, "the node to hold commands under the new policy")
	})
	return f, agent
}

// heldRun runs cmd as token, which must be held, and returns the approval's path.
func (f *fixture) heldRun(token, path, cmd string) (string, *api.Error) {
	f.T.Helper()
	var e *api.Error
	f.as(token, func() {
		e = f.APIErr(http.StatusConflict, api.CodeHeld, "POST", path+"/run", api.RunBody{Command: cmd, TimeoutMS: 20000})
	})
	if e.Approval == "" || e.Rule == "" {
		f.T.Fatalf("held reply without approval or rule: %+v", e)
	}
	return "/v1/approvals/" + e.Approval, e
}

func TestApprovalsAPI(t *testing.T) {
	f, agent := approvalFixture(t)
	s := f.NewSession("n1")
	p := "/v1/sessions/n1/" + s.ID
	dir := t.TempDir()
	marker := filepath.Join(dir, "approved")
	cmd := "echo once >> " + marker + "; (exit 7) # needs-ok"
	ap, held := f.heldRun(agent, p, cmd)
	if held.Rule != "needs-a-human" || !strings.HasPrefix(held.Approval, "n1/a") {
		t.Fatalf("held: %+v", held)
	}

	// Listed, pending, for every role that reads.
	var list api.ApprovalList
	f.as(agent, func() { f.Must(http.StatusOK, "GET", "/v1/approvals", nil, &list) })
	var mine *api.Approval
	for i, a := range list.Approvals {
		if a.Addr() == held.Approval {
			mine = &list.Approvals[i]
		}
	}
	if mine == nil || mine.State != api.ApprovalPending || mine.Command != cmd || mine.Principal != "token:agent" || mine.PolicyVersion == 0 {
		t.Fatalf("GET /v1/approvals: %+v", list)
	}
	// The agent (an operator) may not approve, nor another operator; an admin may.
	f.as(agent, func() {
		f.APIErr(http.StatusForbidden, api.CodeForbidden, "POST", ap, api.DecideBody{Decision: api.DecisionApprove})
	})
	ops := f.newToken("ops", api.RoleOperator, "1h")
	f.as(ops, func() {
		f.APIErr(http.StatusForbidden, api.CodeForbidden, "POST", ap, api.DecideBody{Decision: api.DecisionApprove})
	})
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran before an admin approved it")
	}
	var a api.Approval
	f.Must(http.StatusOK, "POST", ap, api.DecideBody{Decision: api.DecisionApprove, Reason: "ok by me"}, &a)
	if a.State != api.ApprovalApproved || a.DecidedBy != "token:bootstrap" || a.Reason != "ok by me" {
		t.Fatalf("decided: %+v", a)
	}
	f.Must(http.StatusOK, "GET", ap+"?wait_ms=20000", nil, &a)
	if !a.Done || a.Block == 0 || a.ExitCode == nil || *a.ExitCode != 7 {
		t.Fatalf("after the run: %+v", a)
	}
	var br api.BlockResult
	f.Must(http.StatusOK, "GET", fmt.Sprintf("%s/blocks/%d", p, a.Block), nil, &br)
	if br.Block.Command != cmd || br.Block.ExitCode == nil || *br.Block.ExitCode != 7 {
		t.Fatalf("its block: %+v", br.Block)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "once\n" {
		t.Fatalf("marker %q, %v: want it written once", b, err)
	}
	f.APIErr(http.StatusGone, api.CodeGone, "POST", ap, api.DecideBody{Decision: api.DecisionDeny})

	// Denied, and expired: never typed.
	denied, expired := filepath.Join(dir, "denied"), filepath.Join(dir, "expired")
	dp, _ := f.heldRun(agent, p, "touch "+denied+" # needs-ok")
	f.as(agent, func() {
		f.Must(http.StatusOK, "POST", dp, api.DecideBody{Decision: api.DecisionDeny, Reason: "changed my mind"}, &a)
	})
	if a.State != api.ApprovalDenied || a.DecidedBy != "token:agent" {
		t.Fatalf("withdrawn by who asked: %+v", a)
	}
	xp, _ := f.heldRun(agent, p, "touch "+expired+" # quick-ok")
	f.Must(http.StatusOK, "GET", xp+"?wait_ms=20000", nil, &a)
	if a.State != api.ApprovalExpired || !a.Done {
		t.Fatalf("after approve_within: %+v", a)
	}
	f.Run("n1", s.ID, "true") // anything typed before this has finished
	for _, m := range []string{denied, expired} {
		if _, err := os.Stat(m); err == nil {
			t.Errorf("%s exists: a command nobody approved ran", m)
		}
	}
	f.Must(http.StatusOK, "GET", "/v1/approvals?state=all&node=n1", nil, &list)
	states := map[string]int{}
	for _, a := range list.Approvals {
		states[a.State]++
	}
	if states[api.ApprovalApproved] != 1 || states[api.ApprovalDenied] != 1 || states[api.ApprovalExpired] != 1 {
		t.Errorf("all approvals: %v", states)
	}
	f.Must(http.StatusOK, "GET", "/v1/approvals?state=denied", nil, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].State != api.ApprovalDenied {
		t.Errorf("denied approvals: %+v", list.Approvals)
	}

	// Bad requests.
	f.APIErr(http.StatusBadRequest, api.CodeBadRequest, "GET", "/v1/approvals?state=maybe", nil)
	f.APIErr(http.StatusBadRequest, api.CodeBadRequest, "GET", "/v1/approvals/n1/s1", nil)
	f.APIErr(http.StatusNotFound, api.CodeNotFound, "GET", "/v1/approvals/n1/a999", nil)
	f.APIErr(http.StatusBadRequest, api.CodeBadRequest, "POST", ap, api.DecideBody{Decision: "maybe"})
	f.APIErr(http.StatusBadRequest, api.CodeBadRequest, "POST", ap, []byte(`{"decision":"approve","by":"token:someone"}`))
}

// TestApprovalsFanout: a fan-out target that is held reports the approval; once
// approved, the node runs it in the target's session.
func TestApprovalsFanout(t *testing.T) {
	f, agent := approvalFixture(t)
	var fo api.Fanout
	f.as(agent, func() {
		f.Must(http.StatusOK, "POST", "/v1/run", api.FanoutRequest{Selector: api.Selector{Nodes: []string{"n1"}}, Command: ": needs-ok; (exit 4)", TimeoutMS: 20000}, &fo)
	})
	if len(fo.Results) != 1 || fo.Results[0].Error == nil || fo.Results[0].Error.Code != api.CodeHeld || fo.Results[0].Error.Approval == "" {
		t.Fatalf("fan-out: %+v", fo)
	}
	ap := "/v1/approvals/" + fo.Results[0].Error.Approval
	var a api.Approval
	f.Must(http.StatusOK, "POST", ap, api.DecideBody{Decision: api.DecisionApprove}, nil)
	f.Must(http.StatusOK, "GET", ap+"?wait_ms=20000", nil, &a)
	if a.Session != fo.Results[0].Session || a.ExitCode == nil || *a.ExitCode != 4 {
		t.Fatalf("approval after the run: %+v (target session %s)", a, fo.Results[0].Session)
	}
}

// TestApprovalsMCP: an agent over /mcp (operator token) gets held from
// run_command, and wait_for returns the result once an admin approved.
func TestApprovalsMCP(t *testing.T) {
	f, agent := approvalFixture(t)
	s := f.NewSession("n1")
	var c *mcpc
	f.as(agent, func() { c = mcpHTTP(t, f) })
	var b struct {
		block
		Approval, Rule string
	}
	text := c.ok("run_command", map[string]any{"node": "n1", "session": s.ID, "command": "echo approved-output; (exit 5) # needs-ok"}, &b)
	if b.State != "held" || b.Approval == "" || b.Rule != "needs-a-human" || !strings.Contains(text, "wait_for") {
		t.Fatalf("run_command: %+v\n%s", b, text)
	}
	// Not decided yet: wait_for times out saying so.
	text = c.ok("wait_for", map[string]any{"node": "n1", "session": s.ID, "approval": b.Approval, "timeout_ms": 200}, &b)
	if b.State != "held" || b.OK == nil || *b.OK || !strings.Contains(text, "still pending") {
		t.Fatalf("wait_for before the decision: %+v\n%s", b, text)
	}
	f.Must(http.StatusOK, "POST", "/v1/approvals/"+b.Approval, api.DecideBody{Decision: api.DecisionApprove, Reason: "go"}, nil)
	text = c.ok("wait_for", map[string]any{"node": "n1", "session": s.ID, "approval": b.Approval, "timeout_ms": 20000}, &b)
	if b.State != api.BlockDone || b.exit() != 5 || b.OK == nil || !*b.OK || !strings.Contains(text, "approved-output") || !strings.Contains(text, "approved by token:bootstrap") {
		t.Fatalf("wait_for after approval: %+v\n%s", b, text)
	}
}
