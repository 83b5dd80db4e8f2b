package httpapi_test

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

const createPolicy = `version: 1
rules:
  - name: no-markers
    match: {command: 'touch\s+\S*marker'}
    action: deny
  - name: needs-a-human
    match: {command: 'needs-ok'}
    action: approve
  - name: default
    action: allow
`

// TestCreateDecidedOverHTTP performs the create that skipped the policy through
// POST /v1/sessions: a denied argv (also inside sh -c) and PROMPT_COMMAND are 403
// denied and start nothing; an approve-rule argv is 409 held and starts only once
// an admin approves it. On the old code each started at once.
func TestCreateDecidedOverHTTP(t *testing.T) {
	f := newFixture(t, stack.Options{Store: true, Policy: true})
	f.setPolicyEverywhere(t, createPolicy)
	agent := f.newToken("agent", api.RoleOperator, "1h")
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	create := func(r api.CreateRequest) api.NewSession {
		r.Cwd = dir
		return api.NewSession{Node: "n1", CreateRequest: r}
	}
	var held *api.Error
	f.as(agent, func() {
		if e := f.APIErr(http.StatusForbidden, api.CodeDenied, "POST", "/v1/sessions", create(api.CreateRequest{Argv: []string{"/bin/sh", "-c", "touch " + marker}})); e.Rule != "no-markers" {
			t.Fatalf("denied argv: %+v", e)
		}
		if e := f.APIErr(http.StatusForbidden, api.CodeDenied, "POST", "/v1/sessions", create(api.CreateRequest{Shell: "bash", Env: map[string]string{"PROMPT_COMMAND": "touch " + marker}})); e.Rule != "env-runs-code" {
			t.Fatalf("PROMPT_COMMAND: %+v", e)
		}
		held = f.APIErr(http.StatusConflict, api.CodeHeld, "POST", "/v1/sessions", create(api.CreateRequest{Argv: []string{"sh", "-c", "echo needs-ok > " + marker + "-ok; sleep 60"}}))
	})
	if held.Approval == "" || held.Rule != "needs-a-human" {
		t.Fatalf("held create: %+v", held)
	}
	if markerThere(marker) || markerThere(marker+"-ok") {
		t.Fatal("a denied or held create ran")
	}
	ap := "/v1/approvals/" + held.Approval
	var a api.Approval
	f.Must(http.StatusOK, "POST", ap, api.DecideBody{Decision: api.DecisionApprove}, &a)
	f.Must(http.StatusOK, "GET", ap+"?wait_ms=20000", nil, &a)
	if a.Kind != api.ApprovalCreate || !a.Done || a.Session == "" || a.Error != "" {
		t.Fatalf("approved create: %+v", a)
	}
	testutil.Eventually(t, 20*time.Second, func() bool { return markerThere(marker + "-ok") }, "the approved session to start")
}
