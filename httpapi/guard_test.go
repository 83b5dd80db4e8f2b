package httpapi_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// guardPolicy denies creating any file named like a marker.
const guardPolicy = `version: 1
rules:
  - name: no-markers
    match: {command: 'touch\s+\S*marker'}
    action: deny
  - name: default
    action: allow
`

// setPolicy stores doc through PUT /v1/policy and returns its version.
func (f *fixture) setPolicy(t *testing.T, doc string) uint64 {
	t.Helper()
	code, b := f.Do("PUT", "/v1/policy", []byte(doc), "Content-Type", "application/yaml")
	if code != 200 {
		t.Fatalf("PUT /v1/policy: %d %s", code, b)
	}
	var pi api.PolicyInfo
	f.Must(200, "GET", "/v1/policy", nil, &pi)
	if pi.Document != doc || pi.Version == 0 {
		t.Fatalf("GET /v1/policy after PUT: %+v", pi)
	}
	return pi.Version
}

// setPolicyEverywhere stores doc and waits until every node of the stack has put
// it in force (its audit record of the new version).
func (f *fixture) setPolicyEverywhere(t *testing.T, doc string) uint64 {
	t.Helper()
	feeds := map[string]chan api.AuditRecord{}
	for name := range f.Nodes {
		_, feeds[name] = testutil.AuditSub(t, f.NATS.ClientURL(), name)
	}
	v := f.setPolicy(t, doc)
	for _, feed := range feeds {
		for r := testutil.NextAudit(t, feed, "policy"); r.PolicyVersion != v; r = testutil.NextAudit(t, feed, "policy") {
		}
	}
	return v
}

func markerThere(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestGuardDenies: with a policy set through the API, a denied command does not
// run, whether by run, fan-out or input into a program without shell
// integration, in bash and zsh; the caller sees the rule; the audit records carry
// the policy version. A policy change reaches a running node within a second.
func TestGuardDenies(t *testing.T) {
	f := newFixture(t, stack.Options{Policy: true})
	_, nodeAudit := testutil.AuditSub(t, f.NATS.ClientURL(), "n1")
	_, n2Audit := testutil.AuditSub(t, f.NATS.ClientURL(), "n2")
	_, ctlAudit := testutil.AuditSub(t, f.NATS.ClientURL(), "ctl")
	dir := t.TempDir()
	bash := f.NewSession("n1")
	sh := api.Session{}
	f.Must(201, "POST", "/v1/sessions", api.NewSession{Node: "n1", CreateRequest: api.CreateRequest{Argv: []string{"sh"}, Cwd: dir}}, &sh)
	path := func(s api.Session) string { return "/v1/sessions/" + s.Node + "/" + s.ID }

	// No policy yet: allowed.
	f.Run("n1", bash.ID, "touch "+filepath.Join(dir, "marker0"))

	// A policy change applies on the running nodes within a second.
	start := time.Now()
	version := f.setPolicy(t, guardPolicy)
	stored := time.Since(start)
	for _, feed := range []chan api.AuditRecord{nodeAudit, n2Audit} {
		for r := testutil.NextAudit(t, feed, "policy"); r.PolicyVersion != version; r = testutil.NextAudit(t, feed, "policy") {
		}
	}
	applied := time.Since(start) // on both nodes
	if applied > time.Second {
		t.Errorf("the node put the policy in force %v after PUT /v1/policy, want within 1s", applied)
	}
	var took time.Duration
	for {
		code, b := f.Do("POST", path(bash)+"/run", api.RunBody{Command: "touch " + filepath.Join(dir, "marker1"), TimeoutMS: 20000})
		if code == 403 {
			took = time.Since(start)
			if !strings.Contains(string(b), `"rule":"no-markers"`) {
				t.Fatalf("denial without its rule: %s", b)
			}
			break
		}
		if time.Since(start) > time.Second {
			t.Fatalf("the policy did not apply within 1s: %d %s", code, b)
		}
		// It ran: undo, so the marker check below stays meaningful.
		os.Remove(filepath.Join(dir, "marker1"))
	}
	t.Logf("PUT /v1/policy (and GET) took %v; both nodes' audit records of the new version came %v after the PUT began; a run was denied %v after it", stored, applied, took)
	if r := testutil.NextAudit(t, ctlAudit, "PUT /v1/policy"); r.PolicyVersion != version || r.Principal != "token:bootstrap" || r.Result != "ok" {
		t.Errorf("controller's audit of the policy: %+v, want version %d", r, version)
	}

	// run
	e := f.APIErr(403, api.CodeDenied, "POST", path(bash)+"/run", api.RunBody{Command: "touch " + filepath.Join(dir, "marker2"), TimeoutMS: 20000})
	if e.Rule != "no-markers" {
		t.Errorf("denial names rule %q", e.Rule)
	}
	r := testutil.NextAudit(t, nodeAudit, "run")
	for r.Result != api.CodeDenied {
		r = testutil.NextAudit(t, nodeAudit, "run")
	}
	if r.Rule != "no-markers" || r.PolicyVersion != version || r.Decision != api.ActionDeny {
		t.Errorf("node's audit of the denied run: %+v, want version %d", r, version)
	}

	// fan-out, to both nodes, in bash and zsh
	shells := []string{"bash"}
	if testutil.WantTool(t, "zsh") != "" {
		shells = append(shells, "zsh")
	}
	for _, shell := range shells {
		var out api.Fanout
		f.Must(200, "POST", "/v1/run", api.FanoutRequest{Selector: api.Selector{Nodes: []string{"n1", "n2"}}, Shell: shell,
			Command: "cd " + dir + " && touch " + shell + "-marker", TimeoutMS: 20000}, &out)
		if len(out.Results) != 2 || out.Failed != 2 {
			t.Fatalf("%s fan-out: %+v", shell, out)
		}
		for _, res := range out.Results {
			if res.Error == nil || res.Error.Code != api.CodeDenied || res.Error.Rule != "no-markers" {
				t.Errorf("%s fan-out to %s: %+v", shell, res.Node, res.Error)
			}
		}
	}

	// input into a program without shell integration
	e = f.APIErr(403, api.CodeDenied, "POST", path(sh)+"/input", api.InputBody{Data: "touch marker3\n"})
	if e.Rule != "no-markers" {
		t.Errorf("input denial names rule %q", e.Rule)
	}
	f.Must(200, "POST", path(sh)+"/input", api.InputBody{Data: "touch done\n"}, nil)
	testutil.Eventually(t, 10*time.Second, func() bool { return markerThere(filepath.Join(dir, "done")) }, "the allowed line to run in sh")

	// Nothing denied ran; the command from before the policy did.
	f.Run("n1", bash.ID, "true") // what was typed has run by now
	for _, m := range []string{"marker1", "marker2", "marker3", "bash-marker", "zsh-marker"} {
		if markerThere(filepath.Join(dir, m)) {
			t.Errorf("%s exists: a denied command ran", m)
		}
	}
	if !markerThere(filepath.Join(dir, "marker0")) {
		t.Error("the command run before the policy did not run")
	}

	// Removed: allowed again; the controller's audit names the version removed.
	f.Must(200, "DELETE", "/v1/policy", nil, nil)
	if r := testutil.NextAudit(t, ctlAudit, "DELETE /v1/policy"); r.PolicyVersion != version || r.Result != "ok" {
		t.Errorf("controller's audit of the removal: %+v, want version %d", r, version)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		code, _ := f.Do("POST", path(bash)+"/run", api.RunBody{Command: "touch " + filepath.Join(dir, "marker4"), TimeoutMS: 20000})
		return code == 200
	}, "runs allowed once the policy is removed")
}

// TestGuardBadPolicy: a document that does not parse is refused with its line and
// field, and the policy in force stays.
func TestGuardBadPolicy(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Policy: true, Store: true})
	v := f.setPolicy(t, guardPolicy)
	for _, c := range []struct{ doc, want string }{
		{"version: 1\nrules:\n  - name: x\n    action: explode\n", "line 4: rules[0].action"},
		{"version: 1\nrules:\n  - name: x\n    match: {command: '('}\n    action: deny\n", "line 4: rules[0].match.command"},
		{"version: 2\n", "line 1: version"},
		{"rules: [", "line 1"},
	} {
		code, b := f.Do("PUT", "/v1/policy", []byte(c.doc), "Content-Type", "application/yaml")
		if code != 400 || !strings.Contains(string(b), c.want) || !strings.Contains(string(b), `"code":"bad_request"`) {
			t.Errorf("PUT %q: %d %s; want 400 naming %q", c.doc, code, b, c.want)
		}
	}
	code, b := f.Do("PUT", "/v1/policy", []byte(strings.Repeat("#", 300<<10)), "Content-Type", "application/yaml")
	if code != 413 {
		t.Errorf("oversized policy: %d %s", code, b)
	}
	f.APIErr(400, api.CodeBadRequest, "PUT", "/v1/policy", []byte("version: 1"), "Content-Type", "image/png")
	var pi api.PolicyInfo
	f.Must(200, "GET", "/v1/policy", nil, &pi)
	if pi.Version != v || pi.Document != guardPolicy || pi.Rules != 2 {
		t.Errorf("policy after refused ones: %+v, want version %d", pi, v)
	}
	// Roles: an operator reads it, only an admin sets or removes it.
	op := f.newToken("op", api.RoleOperator, "")
	viewer := f.newToken("viewer", api.RoleViewer, "")
	f.as(op, func() {
		f.Must(200, "GET", "/v1/policy", nil, nil)
		f.APIErr(403, api.CodeForbidden, "PUT", "/v1/policy", []byte("version: 1\n"))
		f.APIErr(403, api.CodeForbidden, "DELETE", "/v1/policy", nil)
	})
	f.as(viewer, func() { f.APIErr(403, api.CodeForbidden, "GET", "/v1/policy", nil) })
}

// TestGuardWarnsWithoutPolicy: a controller reachable beyond loopback says loudly
// that no policy is set; one on loopback only says it.
func TestGuardWarnsWithoutPolicy(t *testing.T) {
	for _, exposed := range []bool{true, false} {
		var logs testutil.Buffer
		newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Policy: true, Config: func(c *controller.Config) {
			c.Exposed = exposed
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		}})
		// The controller looks at the policy on a goroutine of its own as it starts.
		testutil.Eventually(t, 10*time.Second, func() bool {
			return strings.Contains(strings.ToLower(logs.String()), "no policy set")
		}, "the controller to say whether a policy is set")
		warned := strings.Contains(logs.String(), "level=WARN msg=\"NO POLICY SET")
		if warned != exposed {
			t.Errorf("exposed %v: warned %v; log:\n%s", exposed, warned, logs.String())
		}
	}
}

// TestGuardMCP: an agent's run_command and fanout_run (MCP over HTTP, the Go SDK
// client) are denied by the node under the policy: a tool error naming the rule,
// and nothing runs.
func TestGuardMCP(t *testing.T) {
	f := newFixture(t, stack.Options{Policy: true})
	dir := t.TempDir()
	s := f.NewSession("n1")
	f.setPolicyEverywhere(t, guardPolicy)
	c := mcpHTTP(t, f)
	c.fail("run_command", map[string]any{"node": "n1", "session": s.ID, "command": "touch " + filepath.Join(dir, "marker")}, "denied", "no-markers")
	text := c.ok("fanout_run", map[string]any{"nodes": []string{"n1", "n2"}, "command": "touch " + filepath.Join(dir, "fan-marker")}, nil)
	if !strings.Contains(text, "failed=2") || strings.Count(text, `denied by rule "no-markers"`) != 2 {
		t.Errorf("fanout_run result does not name the rule:\n%s", text)
	}
	c.ok("run_command", map[string]any{"node": "n1", "session": s.ID, "command": "touch " + filepath.Join(dir, "done")}, nil)
	for _, m := range []string{"marker", "fan-marker"} {
		if markerThere(filepath.Join(dir, m)) {
			t.Errorf("%s exists: a denied command ran through MCP", m)
		}
	}
	if !markerThere(filepath.Join(dir, "done")) {
		t.Error("the allowed command did not run")
	}
}
