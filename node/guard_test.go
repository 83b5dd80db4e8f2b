package node_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// docSource is a node.PolicySource the test sets documents in, as the
// FLEETMUX_POLICY bucket would (the real one is tested with the stack).
type docSource struct {
	mu  sync.Mutex // guards fn, doc, rev; held while fn runs (never twice at once)
	fn  func([]byte, uint64)
	doc []byte
	rev uint64
}

var _ node.PolicySource = (*docSource)(nil)

func (s *docSource) Watch(ctx context.Context, fn func([]byte, uint64)) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fn = fn
	fn(s.doc, s.rev)
	return func() {
		s.mu.Lock()
		s.fn = nil
		s.mu.Unlock()
	}, nil
}

// set stores a new version (doc nil: deleted).
func (s *docSource) set(doc string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doc, s.rev = []byte(doc), rev
	if doc == "" {
		s.doc = nil
	}
	if s.fn != nil {
		s.fn(s.doc, s.rev)
	}
}

const markerPolicy = `version: 1
rules:
  - name: no-markers
    match: {command: 'touch\s+\S*marker'}
    action: deny
  - name: default
    action: allow
`

func guardFixture(t *testing.T, doc string, rev uint64) (*fixture, *docSource) {
	src := &docSource{rev: rev}
	if doc != "" {
		src.doc = []byte(doc)
	}
	f := newFixture(t, func(c *node.Config) { c.Policy = src })
	return f, src
}

// denied checks err is a denial naming rule.
func denied(t *testing.T, err error, rule string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodeDenied || e.Rule != rule {
		t.Fatalf("got %v (%#v), want denied by rule %q", err, e, rule)
	}
}

func TestGuardRunDenied(t *testing.T) {
	f, _ := guardFixture(t, markerPolicy, 7)
	_, audits := testutil.AuditSub(t, f.srv.ClientURL(), "n1")
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	s := f.create(api.CreateRequest{Shell: "bash", Cwd: dir})
	err := f.call("run", api.RunRequest{Session: s.ID, Command: "touch " + marker, TimeoutMS: 20000}, nil)
	denied(t, err, "no-markers")
	// Through an idempotency key too.
	err = f.call("run", api.RunRequest{Session: s.ID, Command: "true; touch marker", IdempotencyKey: "k1", TimeoutMS: 20000}, nil)
	denied(t, err, "no-markers")
	f.run(s.ID, "touch "+filepath.Join(dir, "after"))
	if fileThere(marker) || !fileThere(filepath.Join(dir, "after")) {
		t.Fatalf("marker exists %v, after exists %v: the denied command ran, or the allowed one did not", fileThere(marker), fileThere(filepath.Join(dir, "after")))
	}
	want := []struct{ result, decision, rule string }{
		{api.CodeDenied, api.ActionDeny, "no-markers"}, {api.CodeDenied, api.ActionDeny, "no-markers"}, {"ok", api.ActionAllow, "default"},
	}
	for _, w := range want {
		r := testutil.NextAudit(t, audits, "run")
		if r.Result != w.result || r.Decision != w.decision || r.Rule != w.rule || r.PolicyVersion != 7 {
			t.Fatalf("audit record %+v, want %+v at policy version 7", r, w)
		}
	}
}

func TestGuardInputWithoutIntegration(t *testing.T) {
	testutil.NeedTool(t, "sh")
	f, _ := guardFixture(t, markerPolicy, 3)
	_, audits := testutil.AuditSub(t, f.srv.ClientURL(), "n1")
	dir := t.TempDir()
	s := f.create(api.CreateRequest{Argv: []string{"sh"}, Cwd: dir})
	// In one piece, in two pieces ended by Enter, and after an edit.
	denied(t, f.call("input", api.InputRequest{Session: s.ID, Data: "touch marker1\n"}, nil), "no-markers")
	f.mustCall("input", api.InputRequest{Session: s.ID, Data: "touch mar"}, nil)
	f.mustCall("input", api.InputRequest{Session: s.ID, Data: "ker2"}, nil)
	denied(t, f.call("keys", api.KeysRequest{Session: s.ID, Keys: []string{"Enter"}}, nil), "no-markers")
	f.mustCall("keys", api.KeysRequest{Session: s.ID, Keys: []string{"C-u"}}, nil)
	denied(t, f.call("input", api.InputRequest{Session: s.ID, Data: "touch mx\x7farker3\r"}, nil), "no-markers")
	f.mustCall("input", api.InputRequest{Session: s.ID, Data: "touch done\n"}, nil)
	testutil.Eventually(t, 10*time.Second, func() bool { return fileThere(filepath.Join(dir, "done")) }, "the allowed line to run")
	for _, m := range []string{"marker1", "marker2", "marker3"} {
		if fileThere(filepath.Join(dir, m)) {
			t.Fatalf("%s exists: a denied line ran", m)
		}
	}
	r := testutil.NextAudit(t, audits, "input")
	if r.Result != api.CodeDenied || r.Rule != "no-markers" || r.PolicyVersion != 3 {
		t.Fatalf("audit record %+v", r)
	}
}

func TestGuardInputAtIntegratedPrompt(t *testing.T) {
	f, _ := guardFixture(t, markerPolicy, 1)
	shells := []string{"bash"}
	if testutil.WantTool(t, "zsh") != "" {
		shells = append(shells, "zsh")
	}
	for _, shell := range shells {
		dir := t.TempDir()
		s := f.create(api.CreateRequest{Shell: shell, Cwd: dir})
		f.run(s.ID, "true") // at the prompt, integrated
		denied(t, f.call("input", api.InputRequest{Session: s.ID, Data: "touch marker\n"}, nil), "no-markers")
		f.run(s.ID, "touch done")
		if fileThere(filepath.Join(dir, "marker")) || !fileThere(filepath.Join(dir, "done")) {
			t.Fatalf("%s: the denied line ran, or the allowed one did not", shell)
		}
	}
}

func TestGuardPolicyVersions(t *testing.T) {
	f, src := guardFixture(t, "", 0)
	dir := t.TempDir()
	s := f.create(api.CreateRequest{Shell: "bash", Cwd: dir})
	f.run(s.ID, "touch marker0") // no policy: allowed

	src.set(markerPolicy, 5)
	denied(t, f.call("run", api.RunRequest{Session: s.ID, Command: "touch marker1", TimeoutMS: 20000}, nil), "no-markers")

	// A version that does not parse leaves version 5 in force.
	src.set("version: 1\nrules:\n  - name: broken\n    action: explode\n", 6)
	denied(t, f.call("run", api.RunRequest{Session: s.ID, Command: "touch marker2", TimeoutMS: 20000}, nil), "no-markers")

	// Deleted: no policy, everything allowed.
	src.set("", 7)
	f.run(s.ID, "touch marker3")
	if fileThere(filepath.Join(dir, "marker1")) || fileThere(filepath.Join(dir, "marker2")) || !fileThere(filepath.Join(dir, "marker3")) {
		t.Fatal("markers do not match the policy versions in force")
	}
}

func TestGuardUnreadableFirstPolicyDeniesAll(t *testing.T) {
	f, src := guardFixture(t, "rules: [", 2)
	s := f.create(api.CreateRequest{Shell: "bash"})
	denied(t, f.call("run", api.RunRequest{Session: s.ID, Command: "true", TimeoutMS: 20000}, nil), "policy-unreadable")
	src.set(markerPolicy, 3)
	f.run(s.ID, "true")
}

func fileThere(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestGuardWarnsWithoutPolicy: a node reachable beyond loopback says loudly that
// no policy is in force; one on loopback only says it.
func TestGuardWarnsWithoutPolicy(t *testing.T) {
	for _, exposed := range []bool{true, false} {
		var logs testutil.Buffer
		newFixture(t, func(c *node.Config) {
			c.Policy, c.Exposed = &docSource{}, exposed
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		testutil.Eventually(t, 5*time.Second, func() bool { return strings.Contains(strings.ToLower(logs.String()), "no policy in force") },
			"the node to say it has no policy")
		if warned := strings.Contains(logs.String(), "level=WARN msg=\"NO POLICY in force"); warned != exposed {
			t.Errorf("exposed %v: warned %v; log:\n%s", exposed, warned, logs.String())
		}
	}
}
