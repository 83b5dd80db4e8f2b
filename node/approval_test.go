package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// approvalPolicy holds every command that mentions "held" for a person; one that
// mentions "quick" expires after a second; "ops" may also be approved by operators.
const approvalPolicy = `version: 1
rules:
  - name: quick
    match: {command: 'quick'}
    action: approve
    approve_within: 1s
  - name: ops-may-approve
    match: {command: 'opsok'}
    action: approve
    approvers: [operator]
  - name: needs-a-human
    match: {command: 'held'}
    action: approve
`

// callAs makes a request signed for actor (principal "test:"+actor) with role.
func (f *fixture) callAs(actor, role, verb string, req, out any) error {
	f.t.Helper()
	data, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reply, err := f.client.Request(ctx, f.subj.RPC("n1", verb), f.trust.Header(f.t, f.subj.RPC("n1", verb), data, actor, role), data)
	if aerr := (*api.Error)(nil); errors.As(err, &aerr) {
		return aerr
	}
	if err != nil {
		f.t.Fatalf("%s: request: %v", verb, err)
	}
	if out != nil {
		if err := json.Unmarshal(reply, out); err != nil {
			f.t.Fatalf("%s: reply %q: %v", verb, reply, err)
		}
	}
	return nil
}

// heldRun runs cmd, which must be held, and returns its approval's id.
func (f *fixture) heldRun(id, cmd string) string {
	f.t.Helper()
	err := f.call("run", api.RunRequest{Session: id, Command: cmd, TimeoutMS: 20000}, nil)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeHeld || ae.Approval == "" {
		f.t.Fatalf("run %q: %v, want held", cmd, err)
	}
	node, aid, perr := api.ParseApprovalAddr(ae.Approval)
	if perr != nil || node != "n1" {
		f.t.Fatalf("held reply names approval %q: %v", ae.Approval, perr)
	}
	return aid
}

// approvalEvents collects the node's approval events.
type approvalEvents struct {
	mu  sync.Mutex
	evs []api.ApprovalEvent
}

func (f *fixture) watchApprovals() *approvalEvents {
	c := &approvalEvents{}
	stop, err := f.client.Subscribe(f.subj.Approval("n1"), func(_ string, _ map[string]string, data []byte) {
		var ev api.ApprovalEvent
		if json.Unmarshal(data, &ev) == nil {
			c.mu.Lock()
			c.evs = append(c.evs, ev)
			c.mu.Unlock()
		}
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { stop() })
	return c
}

func (c *approvalEvents) types(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, ev := range c.evs {
		if ev.Approval.ID == id {
			out = append(out, ev.Type)
		}
	}
	return out
}

func TestApprovalApprovedRunsOnce(t *testing.T) {
	f, _ := guardFixture(t, approvalPolicy, 7)
	evs := f.watchApprovals()
	s := f.create(api.CreateRequest{})
	dir := t.TempDir()
	marker := filepath.Join(dir, "m")
	cmd := "echo held >> " + marker + "; (exit 7)"
	id := f.heldRun(s.ID, cmd)

	var list api.ApprovalList
	f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list)
	if len(list.Approvals) != 1 {
		t.Fatalf("pending approvals: %+v", list)
	}
	a := list.Approvals[0]
	if a.ID != id || a.Session != s.ID || a.Command != cmd || a.Rule != "needs-a-human" || a.PolicyVersion != 7 ||
		a.Principal != "test:tester" || a.Kind != api.ApprovalRun || a.State != api.ApprovalPending {
		t.Fatalf("approval = %+v", a)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the held command ran before anyone approved it")
	}
	// An operator may not approve (the rule names no approvers), nor may who asked.
	if err := f.callAs("op", api.RoleOperator, "decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil); code(err) != api.CodeForbidden {
		t.Fatalf("operator decide: %v, want forbidden", err)
	}
	if err := f.call("decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil); code(err) != api.CodeForbidden || !strings.Contains(err.Error(), "someone else") {
		t.Fatalf("self-approval: %v, want forbidden", err)
	}
	var got api.Approval
	if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionApprove, Reason: "looks fine"}}, &got); err != nil {
		t.Fatal(err)
	}
	if got.State != api.ApprovalApproved || got.DecidedBy != "test:boss" || got.Reason != "looks fine" || got.DecidedAt == nil {
		t.Fatalf("decided = %+v", got)
	}
	f.mustCall("approval", api.ApprovalRequest{ID: id, TimeoutMS: 20000}, &got)
	if !got.Done || got.Block == 0 || got.ExitCode == nil || *got.ExitCode != 7 || got.Error != "" {
		t.Fatalf("after the run: %+v", got)
	}
	var br api.BlockResult
	f.mustCall("block", api.BlockRequest{Session: s.ID, N: got.Block}, &br)
	if br.Block.Command != cmd || br.Block.ExitCode == nil || *br.Block.ExitCode != 7 {
		t.Fatalf("block %d = %+v", got.Block, br.Block)
	}
	b, err := os.ReadFile(marker)
	if err != nil || string(b) != "held\n" {
		t.Fatalf("marker %q, %v: want it written once", b, err)
	}
	// Decided once only.
	if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionDeny}}, nil); code(err) != api.CodeGone {
		t.Fatalf("second decision: %v, want gone", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		return strings.Join(evs.types(id), ",") == "held,approved,done"
	}, "events held, approved, done (got %v)", evs.types(id))
}

func TestApprovalDeniedAndExpiredNeverRun(t *testing.T) {
	f, _ := guardFixture(t, approvalPolicy, 1)
	evs := f.watchApprovals()
	s := f.create(api.CreateRequest{})
	dir := t.TempDir()
	denied, expired := filepath.Join(dir, "denied"), filepath.Join(dir, "expired")
	id := f.heldRun(s.ID, "touch "+denied+" # held")
	if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionDeny, Reason: "no"}}, nil); err != nil {
		t.Fatal(err)
	}
	qid := f.heldRun(s.ID, "touch "+expired+" # quick")
	var got api.Approval
	f.mustCall("approval", api.ApprovalRequest{ID: qid, TimeoutMS: 20000}, &got)
	if got.State != api.ApprovalExpired || !got.Done {
		t.Fatalf("after approve_within: %+v", got)
	}
	// Deciding an expired approval is refused.
	if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: qid, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil); code(err) != api.CodeGone || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("approving an expired approval: %v, want gone", err)
	}
	f.run(s.ID, "true") // the session still works, and nothing typed before this
	for _, p := range []string{denied, expired} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists: a command that was not approved ran", p)
		}
	}
	var bl api.BlockList
	f.mustCall("blocks", api.SessionRequest{Session: s.ID}, &bl)
	if len(bl.Blocks) != 1 {
		t.Fatalf("blocks %+v: want only the true", bl.Blocks)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		return strings.Join(evs.types(id), ",") == "held,denied" && strings.Join(evs.types(qid), ",") == "held,expired"
	}, "events (got %v and %v)", evs.types(id), evs.types(qid))
}

func TestApprovalApprovers(t *testing.T) {
	f, _ := guardFixture(t, approvalPolicy, 1)
	s := f.create(api.CreateRequest{})
	id := f.heldRun(s.ID, "true opsok")
	if err := f.callAs("viewer", api.RoleViewer, "decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil); code(err) != api.CodeForbidden {
		t.Fatalf("viewer decide: %v, want forbidden", err)
	}
	var got api.Approval
	if err := f.callAs("op", api.RoleOperator, "decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, &got); err != nil {
		t.Fatalf("an operator the rule names: %v", err)
	}
	f.mustCall("approval", api.ApprovalRequest{ID: id, TimeoutMS: 20000}, &got)
	if got.ExitCode == nil || *got.ExitCode != 0 {
		t.Fatalf("approval %+v", got)
	}
	// Bad requests change nothing.
	for _, req := range []api.DecideRequest{
		{ID: "a999", DecideBody: api.DecideBody{Decision: api.DecisionDeny}},
		{ID: "x1", DecideBody: api.DecideBody{Decision: api.DecisionDeny}},
		{ID: id, DecideBody: api.DecideBody{Decision: "maybe"}},
		{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionDeny, Reason: "a\x1b[2Jb"}},
	} {
		if err := f.call("decide", req, nil); err == nil || code(err) == api.CodeInternal {
			t.Errorf("decide %+v: %v, want a clear refusal", req, err)
		}
	}
	if err := f.call("approvals", api.ApprovalsRequest{State: "nope"}, nil); code(err) != api.CodeBadRequest {
		t.Errorf("approvals state nope: %v", err)
	}
}

// TestApprovalRedacted: the command of an approval leaves the node redacted (the
// approvals verb, events), while the approved run types it as it was asked.
func TestApprovalRedacted(t *testing.T) {
	const key = "AKIAIOSFODNN7EXAMPLE"
	f, _ := guardFixture(t, approvalPolicy+"redact:\n  - {name: aws-key, pattern: 'AKIA[0-9A-Z]{16}'}\n", 3)
	evs := f.watchApprovals()
	s := f.create(api.CreateRequest{})
	marker := filepath.Join(t.TempDir(), "key")
	id := f.heldRun(s.ID, "printf %s "+key+" > "+marker+" # held")
	var list api.ApprovalList
	f.mustCall("approvals", api.ApprovalsRequest{}, &list)
	if len(list.Approvals) != 1 || strings.Contains(list.Approvals[0].Command, key) || !strings.Contains(list.Approvals[0].Command, "[REDACTED:aws-key]") {
		t.Fatalf("approvals: %+v", list.Approvals)
	}
	if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil); err != nil {
		t.Fatal(err)
	}
	var got api.Approval
	f.mustCall("approval", api.ApprovalRequest{ID: id, TimeoutMS: 20000}, &got)
	if got.ExitCode == nil || *got.ExitCode != 0 {
		t.Fatalf("approval %+v", got)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != key {
		t.Fatalf("the approved run typed %q (%v), want the command as asked", b, err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		return strings.Join(evs.types(id), ",") == "held,approved,done"
	}, "events held, approved, done (got %v)", evs.types(id))
	evs.mu.Lock()
	defer evs.mu.Unlock()
	for _, ev := range evs.evs {
		if strings.Contains(ev.Approval.Command, key) {
			t.Errorf("event %s carries the key: %q", ev.Type, ev.Approval.Command)
		}
	}
}

// TestApprovalInputWithoutIntegration: input and keys into a program without shell
// integration that end a held line are held whole (nothing written); approved, the
// node writes them as they were asked, so a line typed in pieces ends up whole.
func TestApprovalInputWithoutIntegration(t *testing.T) {
	testutil.NeedTool(t, "sh")
	f, _ := guardFixture(t, approvalPolicy, 1)
	dir := t.TempDir()
	s := f.create(api.CreateRequest{Argv: []string{"sh"}, Cwd: dir})
	heldInput := func(verb string, req any) string {
		t.Helper()
		err := f.call(verb, req, nil)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeHeld {
			t.Fatalf("%s: %v, want held", verb, err)
		}
		_, id, _ := api.ParseApprovalAddr(ae.Approval)
		return id
	}
	var got api.Approval
	approve := func(id string) {
		t.Helper()
		if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil); err != nil {
			t.Fatal(err)
		}
		f.mustCall("approval", api.ApprovalRequest{ID: id, TimeoutMS: 20000}, &got)
		if !got.Done || got.Error != "" {
			t.Fatalf("approval %s: %+v", id, got)
		}
	}
	one := heldInput("input", api.InputRequest{Session: s.ID, Data: "touch one # held\n"})
	if fileThere(filepath.Join(dir, "one")) {
		t.Fatal("held input ran")
	}
	approve(one)
	f.mustCall("input", api.InputRequest{Session: s.ID, Data: "touch tw"}, nil)
	f.mustCall("input", api.InputRequest{Session: s.ID, Data: "o # held"}, nil)
	two := heldInput("keys", api.KeysRequest{Session: s.ID, Keys: []string{"Enter"}})
	f.mustCall("approval", api.ApprovalRequest{ID: two}, &got)
	if got.Kind != api.ApprovalInput || got.Command != "touch two # held" {
		t.Fatalf("the keys' approval: %+v", got)
	}
	approve(two)
	no := heldInput("input", api.InputRequest{Session: s.ID, Data: "touch never # held\n"})
	if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: no, DecideBody: api.DecideBody{Decision: api.DecisionDeny}}, nil); err != nil {
		t.Fatal(err)
	}
	f.mustCall("input", api.InputRequest{Session: s.ID, Data: "touch done\n"}, nil)
	testutil.Eventually(t, 10*time.Second, func() bool { return fileThere(filepath.Join(dir, "done")) }, "the last line to run")
	for m, want := range map[string]bool{"one": true, "two": true, "never": false} {
		if fileThere(filepath.Join(dir, m)) != want {
			t.Errorf("%s there: %v, want %v", m, !want, want)
		}
	}
}

// TestApprovalHeldLine: a line typed at an integrated shell's prompt that an
// approve rule matches waits there, unexecuted, until a person decides: approved,
// the shell runs it (its block has the real exit code); denied, it never runs and
// the block says why. A run that an approval let through is not held again by the
// shell's own check.
func TestApprovalHeldLine(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			if _, err := exec.LookPath(shell); err != nil {
				t.Skipf("%s: %v", shell, err)
			}
			f, _ := guardFixture(t, approvalPolicy, 2)
			evs := f.watchApprovals()
			dir := t.TempDir()
			s := f.create(api.CreateRequest{Shell: shell, Cwd: dir})
			f.run(s.ID, "true")
			marker := filepath.Join(dir, "typed")
			// Typed, not run: the node's own check of the input passes it to the shell,
			// whose check holds it.
			f.mustCall("input", api.InputRequest{Session: s.ID, Data: "echo x > " + marker + "; : held; (exit 6)\r"}, nil)
			var pending api.Approval
			testutil.Eventually(t, 15*time.Second, func() bool {
				var list api.ApprovalList
				f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list)
				if len(list.Approvals) != 1 {
					return false
				}
				pending = list.Approvals[0]
				return true
			}, "the typed line to be held")
			if pending.Kind != api.ApprovalLine || pending.Principal != "test:tester" || !strings.Contains(pending.Command, marker) {
				t.Fatalf("the held line: %+v", pending)
			}
			if fileThere(marker) {
				t.Fatal("the held line ran before anyone approved it")
			}
			var got api.Approval
			if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: pending.ID, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, &got); err != nil {
				t.Fatal(err)
			}
			var b api.Block
			testutil.Eventually(t, 15*time.Second, func() bool {
				var list api.BlockList
				if err := f.call("blocks", api.SessionRequest{Session: s.ID}, &list); err != nil || len(list.Blocks) < 2 {
					return false
				}
				b = list.Blocks[1]
				return b.State == api.BlockDone
			}, "the approved line's block to finish")
			if b.ExitCode == nil || *b.ExitCode != 6 || !fileThere(marker) {
				var sc api.Screen
				f.mustCall("screen", api.SessionRequest{Session: s.ID}, &sc)
				f.mustCall("approval", api.ApprovalRequest{ID: pending.ID}, &got)
				t.Fatalf("the approved line's block: %+v exit %v (marker there: %v)\napproval %+v\n%s", b, b.ExitCode, fileThere(marker), got, sc.Text)
			}

			// Denied: never runs; the block says why.
			f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: api.UntilIdle, TimeoutMS: 10000}, nil)
			never := filepath.Join(dir, "never")
			f.mustCall("input", api.InputRequest{Session: s.ID, Data: "touch " + never + "; : held\r"}, nil)
			testutil.Eventually(t, 15*time.Second, func() bool {
				var list api.ApprovalList
				f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list)
				if len(list.Approvals) != 1 {
					return false
				}
				pending = list.Approvals[0]
				return true
			}, "the second line to be held")
			if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: pending.ID, DecideBody: api.DecideBody{Decision: api.DecisionDeny, Reason: "no"}}, nil); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 15*time.Second, func() bool {
				var list api.BlockList
				if err := f.call("blocks", api.SessionRequest{Session: s.ID}, &list); err != nil || len(list.Blocks) < 3 {
					return false
				}
				b = list.Blocks[2]
				return b.State == api.BlockDone
			}, "the denied line's block to finish")
			if fileThere(never) || b.ExitCode != nil {
				t.Fatalf("the denied line: %+v (ran: %v)", b, fileThere(never))
			}

			// An approved run is held once, not again by the shell.
			id := f.heldRun(s.ID, ": held; (exit 3)")
			if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: id, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil); err != nil {
				t.Fatal(err)
			}
			f.mustCall("approval", api.ApprovalRequest{ID: id, TimeoutMS: 20000}, &got)
			if got.ExitCode == nil || *got.ExitCode != 3 {
				var sc api.Screen
				f.mustCall("screen", api.SessionRequest{Session: s.ID}, &sc)
				var bl api.BlockList
				f.mustCall("blocks", api.SessionRequest{Session: s.ID}, &bl)
				t.Fatalf("the approved run: %+v\nblocks %+v\n%s", got, bl.Blocks, sc.Text)
			}
			var list api.ApprovalList
			f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list)
			if len(list.Approvals) != 0 {
				t.Fatalf("approvals pending after the approved run: %+v", list.Approvals)
			}
			testutil.Eventually(t, 5*time.Second, func() bool {
				return strings.Join(evs.types(pending.ID), ",") == "held,denied"
			}, "events of the denied line (got %v)", evs.types(pending.ID))
		})
	}
}

// TestApprovalIDsSurviveRestart: approval ids are never reused while the data dir
// lives, and a node that stops expires what is pending (nothing is typed later).
func TestApprovalIDsSurviveRestart(t *testing.T) {
	f1, src := guardFixture(t, approvalPolicy, 1)
	s := f1.create(api.CreateRequest{})
	if id := f1.heldRun(s.ID, "true held"); id != "a1" {
		t.Fatalf("first approval %s, want a1", id)
	}
	evs := f1.watchApprovals()
	if err := f1.node.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		return strings.Join(evs.types("a1"), ",") == "expired"
	}, "a1 to expire when its node stops (events %v)", evs.types("a1"))
	f2 := newFixture(t, func(c *node.Config) { c.DataDir, c.Policy = f1.data, src })
	s2 := f2.create(api.CreateRequest{})
	if id := f2.heldRun(s2.ID, "true held"); id != "a2" {
		t.Fatalf("approval after a restart %s, want a2", id)
	}
	var list api.ApprovalList
	f2.mustCall("approvals", api.ApprovalsRequest{}, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].ID != "a2" {
		t.Fatalf("approvals after a restart: %+v", list.Approvals)
	}
}
