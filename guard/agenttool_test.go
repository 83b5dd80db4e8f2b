package guard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// records keeps audit records and approval events.
type records struct {
	mu     sync.Mutex
	audit  []api.AuditRecord
	events []api.ApprovalEvent
}

func (r *records) Audit(rec api.AuditRecord) {
	r.mu.Lock()
	r.audit = append(r.audit, rec)
	r.mu.Unlock()
}
func (r *records) PublishApproval(ev api.ApprovalEvent) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// staticPolicy is a policy source with one version (7) of a document.
type staticPolicy string

func (p staticPolicy) Watch(ctx context.Context, fn func(doc []byte, revision uint64)) (func(), error) {
	fn([]byte(p), 7)
	return func() {}, nil
}

// toolTarget is a session as the guard sees it, for tool requests.
type toolTarget struct{}

func (toolTarget) ID() string                { return "s1" }
func (toolTarget) Labels() map[string]string { return nil }
func (toolTarget) Integrated() bool          { return false }
func (toolTarget) BlockDone(int) bool        { return true }
func (toolTarget) Replay(context.Context, Held) (int, *int, error) {
	return 0, nil, errors.New("nothing to replay")
}

// TestCheckTool: an agent's tool request is decided by the policy: allow at once,
// deny naming the rule, approve held as an approval of kind agent_tool (agent,
// tool, the command) until someone other than who spawned the agent decides;
// every decision is audited with who asked, and the decision with who decided.
func TestCheckTool(t *testing.T) {
	rec := &records{}
	src := staticPolicy(`version: 1
rules:
  - {name: no-rm, match: {agent: claude, tool: Bash, input: '^rm '}, action: deny}
  - {name: shell-asks, match: {tool: Bash}, action: approve}
  - {name: reads, match: {tool: Read}, action: allow}
`)
	g, err := New(Config{Node: "n1", DataDir: t.TempDir(), Audit: rec, Events: rec, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	g.Start()
	defer g.Close()
	s := g.NewSession(toolTarget{})
	spawner := Writer{Principal: "token:dev", Role: api.RoleAdmin}
	ctx := context.Background()

	notHeld := func() { t.Error("Held called for a request decided at once") }
	if err := g.CheckTool(ctx, s, spawner, ToolUse{Agent: "claude", Tool: "Read", Input: "/etc/hostname", Held: notHeld}); err != nil {
		t.Fatalf("Read: %v, want allowed", err)
	}
	if err := g.CheckTool(ctx, s, spawner, ToolUse{Agent: "claude", Tool: "Edit", Input: "/tmp/x"}); !errors.Is(err, ErrToolUndecided) {
		t.Fatalf("Edit, which no rule names: %v, want undecided (the agent asks as it would)", err)
	}
	var ae *api.Error
	if err := g.CheckTool(ctx, s, spawner, ToolUse{Agent: "claude", Tool: BashTool, Input: "rm x", Held: notHeld}); !errors.As(err, &ae) || ae.Code != api.CodeDenied || ae.Rule != "no-rm" {
		t.Fatalf("rm: %v, want denied by no-rm", err)
	}

	decide := func(who Writer, decision string) error {
		list, _ := g.Approvals(api.ApprovalPending)
		if len(list.Approvals) != 1 {
			t.Fatalf("%d approvals pending, want 1", len(list.Approvals))
		}
		_, err := g.Decide(who, api.DecideRequest{ID: list.Approvals[0].ID, DecideBody: api.DecideBody{Decision: decision, Reason: "looked"}})
		return err
	}
	for _, c := range []struct {
		decision string
		allowed  bool
	}{{api.DecisionApprove, true}, {api.DecisionDeny, false}} {
		done := make(chan error, 1)
		held := make(chan struct{})
		go func() {
			done <- g.CheckTool(ctx, s, spawner, ToolUse{Agent: "claude", Tool: BashTool, Input: "touch MARKER", Held: func() { close(held) }})
		}()
		select { // Held is called once it waits for someone
		case <-held:
		case <-time.After(5 * time.Second):
			t.Fatal("Held was not called")
		}
		var a api.Approval
		deadline := time.Now().Add(5 * time.Second)
		for {
			list, _ := g.Approvals(api.ApprovalPending)
			if len(list.Approvals) == 1 {
				a = list.Approvals[0]
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the tool request is not held")
			}
			time.Sleep(2 * time.Millisecond)
		}
		if a.Kind != api.ApprovalAgentTool || a.Agent != "claude" || a.Tool != BashTool || a.Command != "touch MARKER" || a.Principal != "token:dev" || a.Rule != "shell-asks" {
			t.Fatalf("held as %+v", a)
		}
		select {
		case err := <-done:
			t.Fatalf("CheckTool returned %v before anyone decided", err)
		default:
		}
		// The attack: a key typed into the agent's own dialog ("1": Yes) while
		// the approval waits would answer it around the approval.
		typist := Writer{Principal: "token:op", Role: api.RoleOperator}
		if err := g.Check(ctx, Request{Verb: VerbKeys, Session: s, Writer: typist, Data: []byte("1")}); !errors.As(err, &ae) || ae.Code != api.CodeBusy || ae.Approval != "n1/"+a.ID {
			t.Fatalf("keys into the agent while its tool is held: %v, want busy naming the approval", err)
		}
		if err := g.Check(ctx, Request{Verb: VerbKeys, Session: s, Writer: typist, Data: []byte("\x1b")}); err != nil {
			t.Fatalf("the interrupt key while its tool is held: %v", err)
		}
		if err := decide(spawner, api.DecisionApprove); err == nil {
			t.Fatal("who spawned the agent approved its tool request")
		}
		if err := decide(Writer{Principal: "token:alice", Role: api.RoleAdmin}, c.decision); err != nil {
			t.Fatal(err)
		}
		err := <-done
		if c.allowed != (err == nil) {
			t.Fatalf("%s: CheckTool = %v", c.decision, err)
		}
		if !c.allowed && (!errors.As(err, &ae) || ae.Code != api.CodeDenied || ae.Approval != "n1/"+a.ID) {
			t.Fatalf("denied: %v, want denied naming the approval", err)
		}
		if err := g.Check(ctx, Request{Verb: VerbKeys, Session: s, Writer: typist, Data: []byte("1")}); err != nil {
			t.Fatalf("keys once decided: %v", err)
		}
	}

	// An agent that stops waiting (interrupted): its approval expires.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- g.CheckTool(cctx, s, spawner, ToolUse{Agent: "claude", Tool: BashTool, Input: "touch LATE"})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for list, _ := g.Approvals(api.ApprovalPending); len(list.Approvals) == 0; list, _ = g.Approvals(api.ApprovalPending) {
		if time.Now().After(deadline) {
			t.Fatal("not held")
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned: %v", err)
	}
	if list, _ := g.Approvals(api.ApprovalExpired); len(list.Approvals) != 1 {
		t.Fatalf("%d expired approvals, want 1", len(list.Approvals))
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var tools, decided int
	for _, r := range rec.audit {
		switch r.Action {
		case AuditAgentTool:
			tools++
			if r.Principal != "token:dev" || r.Session != "s1" || r.PolicyVersion != 7 {
				t.Errorf("tool audit %+v", r)
			}
		case "approval." + api.ApprovalEventApproved, "approval." + api.ApprovalEventDenied:
			decided++
			if r.Principal != "token:alice" {
				t.Errorf("decision audited for %q, want token:alice", r.Principal)
			}
		}
	}
	if tools != 6 || decided != 2 {
		t.Fatalf("%d tool decisions and %d approval decisions audited, want 6 and 2", tools, decided)
	}
}
