package node_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// createPolicy denies touching a marker, holds anything mentioning "needs-ok" for a
// person, and allows the rest.
const createPolicy = `version: 1
rules:
  - name: no-markers
    match: {command: '(^|[;&|''\s])touch\s+\S*marker'}
    action: deny
  - name: needs-a-human
    match: {command: 'needs-ok'}
    action: approve
  - name: default
    action: allow
`

// TestCreateDecidedLikeRun performs the attack of a create that skips the policy:
// a denied command as a session's argv (directly and through sh -c), a shell
// variable that runs code at every prompt (PROMPT_COMMAND), and an approve-rule
// command as argv. Each denied one starts nothing and its audit record names the
// decision; the held one starts only once a person approves it, and the approval
// names the session. On the old code every one of them ran at once.
func TestCreateDecidedLikeRun(t *testing.T) {
	testutil.NeedTool(t, "sh")
	f, _ := guardFixture(t, createPolicy, 9)
	_, audits := testutil.AuditSub(t, f.srv.ClientURL(), "n1")
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")

	denied(t, f.call("create", api.CreateRequest{Argv: []string{"touch", marker}, Cwd: dir}, nil), "no-markers")
	denied(t, f.call("create", api.CreateRequest{Argv: []string{"/bin/sh", "-c", "touch " + marker + "; true"}, Cwd: dir}, nil), "no-markers")
	denied(t, f.call("create", api.CreateRequest{Shell: "bash", Cwd: dir, Env: map[string]string{"PROMPT_COMMAND": "touch " + marker}}, nil), "env-runs-code")
	denied(t, f.call("create", api.CreateRequest{Shell: "bash", Cwd: dir, Env: map[string]string{"BASH_FUNC_ls%%": "() { touch " + marker + "; }"}}, nil), "env-runs-code")
	// A HOME whose .bashrc (sourced by the session's shell) runs what no rule saw.
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".bashrc"), []byte("touch "+marker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	denied(t, f.call("create", api.CreateRequest{Shell: "bash", Cwd: dir, Env: map[string]string{"HOME": home}}, nil), "env-runs-code")
	for _, rule := range []string{"no-markers", "no-markers", "env-runs-code", "env-runs-code", "env-runs-code"} {
		r := testutil.NextAudit(t, audits, "create")
		if r.Result != api.CodeDenied || r.Decision != api.ActionDeny || r.Rule != rule || r.PolicyVersion != 9 {
			t.Fatalf("create audit %+v, want denied by %s at version 9", r, rule)
		}
	}

	// An approve rule holds the create: nothing starts until a person approves.
	done := filepath.Join(dir, "approved")
	err := f.callAs("op", api.RoleOperator, "create", api.CreateRequest{Argv: []string{"sh", "-c", "echo needs-ok > " + done + "; sleep 60"}, Cwd: dir}, nil)
	if code(err) != api.CodeHeld {
		t.Fatalf("create under an approve rule: %v, want held", err)
	}
	if r := testutil.NextAudit(t, audits, "create"); r.Result != api.CodeHeld || r.Decision != api.ActionApprove || r.Rule != "needs-a-human" {
		t.Fatalf("held create audit %+v", r)
	}
	var list api.ApprovalList
	f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].Kind != api.ApprovalCreate || list.Approvals[0].Session != "" {
		t.Fatalf("pending approvals %+v, want one create", list.Approvals)
	}
	if n := len(f.listSessions()); n != 0 {
		t.Fatalf("%d sessions before the approval, want 0", n)
	}
	if fileThere(marker) || fileThere(done) {
		t.Fatal("a denied or held create ran")
	}
	id := list.Approvals[0].ID
	f.mustCall("decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil) // an admin, not the asker
	var a api.Approval
	f.mustCall("approval", api.ApprovalRequest{ID: id, TimeoutMS: 20000}, &a)
	if !a.Done || a.Error != "" || a.Session == "" {
		t.Fatalf("approved create %+v, want done with its session", a)
	}
	testutil.Eventually(t, 20*time.Second, func() bool { return fileThere(done) }, "the approved create to start")
	if s := f.listSessions(); len(s) != 1 || s[0].ID != a.Session {
		t.Fatalf("sessions %+v, want the approved one, %s", s, a.Session)
	}
}

func (f *fixture) listSessions() []api.Session {
	f.t.Helper()
	var l api.SessionList
	f.mustCall("list", api.SessionRequest{}, &l)
	return l.Sessions
}

// TestCreateEnvProgramsRun performs the attack of a create whose environment
// names a command an allowed program runs: GIT_PAGER (PAGER, EDITOR,
// GIT_CONFIG_* with core.pager, …) holding a command the policy denies, then an
// allowed `git -p version`, whose pager ran it with no rule seeing it. On the
// code that refused only what a shell or the loader runs, the marker was made.
func TestCreateEnvProgramsRun(t *testing.T) {
	testutil.NeedTool(t, "git")
	f, _ := guardFixture(t, createPolicy, 9)
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	for _, env := range []map[string]string{
		{"GIT_PAGER": "touch " + marker + "; cat"},
		{"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.pager", "GIT_CONFIG_VALUE_0": "touch " + marker + "; cat"},
	} {
		var s api.Session
		err := f.call("create", api.CreateRequest{Shell: "bash", Cwd: dir, Env: env}, &s)
		if err == nil {
			f.run(s.ID, "git -p version")
			if _, serr := os.Stat(marker); serr == nil {
				t.Fatalf("with %v, an allowed git ran the denied command", env)
			}
		}
		denied(t, err, "env-runs-code")
	}
}
