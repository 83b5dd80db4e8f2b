package node_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/agent"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// claudePolicy holds the agents' Bash for a person unless it touches a
// DENIED file, which it denies.
const claudePolicy = `version: 1
rules:
  - name: no-denied-files
    match: {agent: claude, tool: Bash, input: 'DENIED'}
    action: deny
  - name: shell-needs-a-human
    match: {agent: claude, tool: Bash}
    action: approve
    approve_within: 1m
`

// claudeFixture is a node with claudePolicy that runs the real Claude Code
// (pinned) against a fake Messages API, and the fake.
func claudeFixture(t *testing.T) (*fixture, *testutil.FakeClaude, string) {
	t.Helper()
	claude := testutil.NeedClaudeCode(t) // before the fixture changes HOME
	bin, err := testutil.BuildFleetmux(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fake := testutil.StartFakeClaude(t)
	src := &docSource{rev: 1, doc: []byte(claudePolicy)}
	f := newFixture(t, func(c *node.Config) { c.Policy, c.Self = src, bin })
	return f, fake, claude
}

// waitAgent waits (at most 30 s) until agent id is in one of states.
func (f *fixture) waitAgent(id string, states ...string) api.Agent {
	f.t.Helper()
	var r api.AgentWaitReply
	f.mustCall(api.VerbAgentWait, api.AgentWaitRequest{Agent: id, States: states, TimeoutMS: 30000}, &r)
	if !r.OK {
		f.t.Fatalf("agent %s: %s (source %s, evidence %q), want %v", id, r.Agent.State, r.Agent.StateSource, r.Agent.Evidence, states)
	}
	return r.Agent
}

// agentFrom waits (at most 10 s) until agent id's state comes from source.
func (f *fixture) agentFrom(id, source string) api.Agent {
	f.t.Helper()
	var a api.Agent
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f.mustCall(api.VerbAgentGet, api.AgentRequest{Agent: id}, &a)
		if a.StateSource == source || time.Now().After(deadline) {
			return a
		}
	}
}

// TestClaudeHooksAndApprovals: the real Claude Code, spawned as an agent,
// reports its states through its hooks (source hook); its request to run a Bash
// command is held as an approval of kind agent_tool, nothing running, until an
// admin other than its spawner approves it, and then the command runs; a command
// a deny rule matches never runs.
func TestClaudeHooksAndApprovals(t *testing.T) {
	f, fake, claude := claudeFixture(t)
	work := t.TempDir()
	start := time.Now()
	var a api.Agent
	f.mustCall(api.VerbAgentSpawn, api.SpawnRequest{Driver: api.DriverClaude, Program: claude, Cwd: work, Env: testutil.ClaudeCodeEnvFor(fake)}, &a)
	t.Cleanup(func() {
		if t.Failed() {
			var sc api.Screen
			_ = f.call("screen", api.SessionRequest{Session: a.ID}, &sc)
			for _, q := range fake.Requests() {
				t.Logf("asked %q → %q", q.Prompt, q.Answer)
			}
			t.Logf("the agent's screen:\n%s", sc.Text)
		}
	})
	a = f.waitAgent(a.ID, api.AgentReady)
	t.Logf("spawn → ready in %v (source %s, %s)", time.Since(start).Round(time.Millisecond), a.StateSource, a.Evidence)
	if entries, _ := os.ReadDir(filepath.Join(f.data, "agents")); len(entries) != 1 {
		t.Fatalf("%d agent config dirs, want 1", len(entries))
	}

	// bob (another admin) prompts the agent that tester spawned.
	if err := f.callAs("bob", api.RoleAdmin, api.VerbAgentSend, api.AgentSendRequest{Agent: a.ID, Text: "bash: touch MARKER"}, nil); err != nil {
		t.Fatal(err)
	}
	w := f.waitAgent(a.ID, api.AgentWaitingPermission)
	// On a loaded machine the screen may say it first; the hook then confirms it.
	w = f.agentFrom(a.ID, api.SourceHook)
	if w.State != api.AgentWaitingPermission || !strings.HasPrefix(w.Evidence, "PermissionRequest Bash") {
		t.Fatalf("%s from %s (%q), want waiting_permission from the PermissionRequest hook", w.State, w.StateSource, w.Evidence)
	}
	for _, q := range fake.Requests() {
		if q.Prompt == "bash: touch MARKER" {
			t.Logf("the model's tool_use → waiting_permission (hook): %v", w.StateSince.Sub(q.Time).Round(time.Millisecond))
		}
	}
	var list api.ApprovalList
	f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list)
	if len(list.Approvals) != 1 {
		t.Fatalf("pending approvals: %+v", list.Approvals)
	}
	ap := list.Approvals[0]
	if ap.Kind != api.ApprovalAgentTool || ap.Agent != api.DriverClaude || ap.Tool != "Bash" || ap.Command != "touch MARKER" || ap.Session != a.ID {
		t.Fatalf("approval %+v", ap)
	}
	marker := filepath.Join(work, "MARKER")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran before anyone approved it")
	}
	// Neither who spawned the agent nor who prompted it may approve its
	// request; another admin may.
	err := f.call("decide", api.DecideRequest{ID: ap.ID, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
		t.Fatalf("the spawner approving: %v, want forbidden", err)
	}
	err = f.callAs("bob", api.RoleAdmin, "decide", api.DecideRequest{ID: ap.ID, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil)
	if !errors.As(err, &ae) || ae.Code != api.CodeForbidden {
		t.Fatalf("who prompted it approving: %v, want forbidden", err)
	}
	if err := f.callAs("alice", api.RoleAdmin, "decide", api.DecideRequest{ID: ap.ID, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil); err != nil {
		t.Fatal(err)
	}
	f.waitAgent(a.ID, api.AgentReady)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("approved, the command did not run: %v", err)
	}
	r := f.agentFrom(a.ID, api.SourceHook)
	if r.State != api.AgentReady {
		t.Errorf("%s from %s (%q) after the turn, want ready from a hook", r.State, r.StateSource, r.Evidence)
	}
	reqs := fake.Requests()
	last := reqs[len(reqs)-1]
	t.Logf("the model's last answer → ready: %v", r.StateSince.Sub(last.Time).Round(time.Millisecond))
	// Its turns, from its hooks: the prompt, the tool with its result, the answer.
	var out api.AgentOutput
	f.mustCall(api.VerbAgentOutput, api.AgentOutputRequest{Agent: a.ID}, &out)
	var turns []string
	for _, tr := range out.Turns {
		turns = append(turns, tr.Kind+" "+tr.Tool+" "+tr.Input+" "+tr.Text)
	}
	if got := strings.Join(turns, "|"); got != "prompt   bash: touch MARKER|tool Bash touch MARKER |answer   ran: touch MARKER" {
		t.Fatalf("turns %q", got)
	}

	// Interrupted while its tool waits for approval: the agent cancels its own
	// dialog and stops waiting, the approval expires, the tool never runs.
	if err := f.callAs("bob", api.RoleAdmin, api.VerbAgentSend, api.AgentSendRequest{Agent: a.ID, Text: "bash: touch LATER"}, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list)
		if len(list.Approvals) == 1 {
			break
		}
		if time.Now().After(deadline) {
			var sc api.Screen
			f.mustCall("screen", api.SessionRequest{Session: a.ID}, &sc)
			for _, q := range fake.Requests() {
				t.Logf("asked %q → %q", q.Prompt, q.Answer)
			}
			t.Fatalf("the agent's tool is not held; its screen:\n%s", sc.Text)
		}
	}
	intr := time.Now()
	if err := f.callAs("bob", api.RoleAdmin, api.VerbAgentInterrupt, api.AgentRequest{Agent: a.ID}, nil); err != nil {
		t.Fatalf("interrupt while the tool waits: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalExpired}, &list)
		if len(list.Approvals) == 1 {
			break
		}
		if time.Now().After(deadline) {
			f.mustCall("approvals", api.ApprovalsRequest{}, &list)
			var ag api.Agent
			f.mustCall(api.VerbAgentGet, api.AgentRequest{Agent: a.ID}, &ag)
			t.Fatalf("the interrupted agent's approval did not expire: %+v; agent %s %s %q", list.Approvals, ag.State, ag.StateSource, ag.Evidence)
		}
	}
	if _, err := os.Stat(filepath.Join(work, "LATER")); err == nil {
		t.Fatal("the tool of an interrupted agent ran")
	}
	// Interrupted, Claude Code fires no hook (no Stop): the screen says what
	// came of it, at once when it changed after the interrupt, and within
	// agent.InterruptSettle when it already read ready while the tool waited
	// (not after the hooks' 15 s freshness window).
	var rw api.AgentWaitReply
	f.mustCall(api.VerbAgentWait, api.AgentWaitRequest{Agent: a.ID, States: []string{api.AgentReady}, TimeoutMS: 10000}, &rw)
	if !rw.OK {
		t.Fatalf("interrupted, the agent is %s from %s (%q) after 10 s, want ready", rw.Agent.State, rw.Agent.StateSource, rw.Agent.Evidence)
	}
	t.Logf("interrupted → ready in %v (%s: %q)", rw.Agent.StateSince.Sub(intr).Round(time.Millisecond), rw.Agent.StateSource, rw.Agent.Evidence)
	// Claude Code may put the interrupted prompt back into its composer (then
	// its footer has no "? for shortcuts"): still ready, and the next prompt is
	// sent alone, not glued to it.
	screenHas := func(line string) bool {
		var sc api.Screen
		f.mustCall("screen", api.SessionRequest{Session: a.ID}, &sc)
		return slices.Contains(strings.Split(sc.Text, "\n"), line)
	}
	// The idle composer's footer. Claude Code redraws it by its own diff (cursor
	// moves over cells it believes blank); now and then our screen keeps a stale
	// cell where it moved over one ("?Cfordshortcuts"), so the footer is matched
	// with one cell of slack between its words.
	idleFooter := regexp.MustCompile(`^\s*\?.?for.?shortcuts`)
	testutil.Eventually(t, 10*time.Second, func() bool {
		var sc api.Screen
		f.mustCall("screen", api.SessionRequest{Session: a.ID}, &sc)
		return slices.ContainsFunc(strings.Split(sc.Text, "\n"), idleFooter.MatchString)
	}, "the idle composer")
	if err := f.callAs("bob", api.RoleAdmin, api.VerbInput, api.InputRequest{Session: a.ID, Data: "bash: touch LATER"}, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return screenHas("❯ bash: touch LATER") }, "the prompt in the composer")
	f.waitAgent(a.ID, api.AgentReady)

	// A deny rule, on the same agent: the command never runs, the agent is
	// told, and goes on.
	if err := f.callAs("bob", api.RoleAdmin, api.VerbAgentSend, api.AgentSendRequest{Agent: a.ID, Text: "bash: touch DENIED"}, nil); err != nil {
		t.Fatal(err) // bob again: his writer lease may still hold
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		for _, q := range fake.Requests() {
			if q.ToolError && q.Answer == "denied: touch DENIED" {
				return true
			}
		}
		return false
	}, "the denied tool's error to reach the model")
	f.waitAgent(a.ID, api.AgentReady)
	if _, err := os.Stat(filepath.Join(work, "DENIED")); err == nil {
		t.Fatal("a denied command ran")
	}
	f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list)
	if len(list.Approvals) != 0 {
		t.Fatalf("a denied request was held: %+v", list.Approvals)
	}

	if _, err := os.Stat(filepath.Join(work, "LATER")); err == nil {
		t.Fatal("the tool of the interrupted agent ran later (its own dialog said yes to a later Enter)")
	}

	// A hook event's way to the agent's state: the hook channel, the tracker.
	dirs, _ := os.ReadDir(filepath.Join(f.data, "agents"))
	if len(dirs) != 1 {
		t.Fatalf("%d agent config dirs, want 1", len(dirs))
	}
	t0 := time.Now()
	if _, err := agent.SendHook(context.Background(), filepath.Join(f.data, "agents", dirs[0].Name()), []byte(`{"hook_event_name":"UserPromptSubmit"}`)); err != nil {
		t.Fatal(err)
	}
	sent := time.Since(t0)
	wk := f.waitAgent(a.ID, api.AgentWorking)
	t.Logf("hook event → agent state: the hook's answer after %v, the state changed %v after it was sent", sent.Round(time.Microsecond), wk.StateSince.Sub(t0).Round(time.Microsecond))
	f.mustCall(api.VerbAgentKill, api.AgentRequest{Agent: a.ID}, nil)
	testutil.Eventually(t, 10*time.Second, func() bool {
		entries, _ := os.ReadDir(filepath.Join(f.data, "agents"))
		return len(entries) == 0
	}, "the agent's config dir to go with it")
}
