package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// agentToolPolicy holds a Bash tool use of a claude agent for a person, and
// denies one that touches a DENIED file.
const agentToolPolicy = `version: 1
rules:
  - name: no-denied-files
    match: {agent: claude, tool: Bash, input: 'DENIED'}
    action: deny
  - name: agents-ask-before-shell
    match: {agent: claude, tool: Bash}
    action: approve
    approve_within: 2m
`

// TestClaudeAgentApproval is the real Claude Code (pinned, from npm) on
// `fleetmux dev`, offline against a fake Messages API: spawned, it is ready; a
// prompt makes it work; the fake model asks for Bash `touch MARKER`, which the
// policy holds: the agent waits for permission (its states from its hooks),
// `fleetmux approvals` lists an agent_tool approval, nothing ran; another admin
// approves with `fleetmux approve`, the marker appears, the agent is ready. A
// Bash use a deny rule matches never runs.
func TestClaudeAgentApproval(t *testing.T) {
	claude := testutil.NeedClaudeCode(t) // before dev changes HOME
	fake := testutil.StartFakeClaude(t)
	addr := startDev(t)
	work := t.TempDir()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(agentToolPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errs, err := runArgs(t, "policy", "set", pol); err != nil {
		t.Fatalf("policy set: %v %s %s", err, out, errs)
	}
	c, err := client.New(client.Config{Addr: addr, Token: devAdminToken})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env := testutil.ClaudeCodeEnvFor(fake)
	start := time.Now()
	a, err := c.SpawnAgent(ctx, api.SpawnRequest{Node: "here", Driver: api.DriverClaude, Program: claude, Cwd: work, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(states ...string) api.Agent {
		t.Helper()
		r, err := c.WaitAgent(ctx, a.Node, a.ID, states, 30000)
		if err != nil || !r.OK {
			t.Fatalf("agent %s: %v, %s from %s (%q), want %v", a.Address(), err, r.Agent.State, r.Agent.StateSource, r.Agent.Evidence, states)
		}
		return r.Agent
	}
	wait(api.AgentReady)
	t.Logf("spawn → ready: %v", time.Since(start).Round(time.Millisecond))

	if _, err := c.SendAgent(ctx, a.Node, a.ID, "bash: touch MARKER"); err != nil {
		t.Fatal(err)
	}
	// On a loaded machine the screen may say a state first; the hook then
	// confirms it (the state's source becomes hook).
	fromHook := func() api.Agent {
		t.Helper()
		var ag api.Agent
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			ag, err = c.Agent(ctx, a.Node, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if ag.StateSource == api.SourceHook || time.Now().After(deadline) {
				return ag
			}
		}
	}
	wait(api.AgentWaitingPermission)
	if w := fromHook(); w.State != api.AgentWaitingPermission || w.StateSource != api.SourceHook || !strings.HasPrefix(w.Evidence, "PermissionRequest Bash") {
		t.Fatalf("%s from %s (%q), want waiting_permission from the PermissionRequest hook", w.State, w.StateSource, w.Evidence)
	}
	out, errs, err := runArgs(t, "approvals", "--json")
	var list api.ApprovalList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Approvals) != 1 {
		t.Fatalf("approvals: %v %q %q", err, out, errs)
	}
	ap := list.Approvals[0]
	if ap.Kind != api.ApprovalAgentTool || ap.Tool != "Bash" || ap.Command != "touch MARKER" || ap.Session != a.ID {
		t.Fatalf("approval %+v", ap)
	}
	if out, _, _ := runArgs(t, "approvals"); !strings.Contains(out, "claude Bash: touch MARKER") {
		t.Fatalf("approvals does not show the agent's tool:\n%s", out)
	}
	marker := filepath.Join(work, "MARKER")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the tool ran before anyone approved it")
	}
	// The agent's own dialog is on its screen too: a key typed into it ("1":
	// Yes) would answer it around the approval. No input reaches it meanwhile.
	if err := c.Keys(ctx, a.Node, a.ID, "1"); err == nil || !strings.Contains(err.Error(), ap.Addr()) {
		t.Fatalf("keys into the agent while its tool waits for approval: %v, want refused naming %s", err, ap.Addr())
	}
	if _, _, err := runArgs(t, "approve", ap.Addr()); err == nil {
		t.Fatal("the admin who spawned the agent approved its tool")
	}
	out, errs, err = runArgs(t, "token", "create", "--name", "alice", "--role", "admin", "--ttl", "1h")
	if err != nil {
		t.Fatalf("token create: %v %s", err, errs)
	}
	if _, errs, err := runArgs(t, "approve", "--token", strings.TrimSpace(out), "--addr", addr, ap.Addr(), "--reason", "looked at it"); err != nil {
		t.Fatalf("approve as alice: %v %s", err, errs)
	}
	wait(api.AgentReady)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("approved, the tool did not run: %v", err)
	}
	if r := fromHook(); r.State != api.AgentReady || r.StateSource != api.SourceHook {
		t.Errorf("%s from %s (%q) after the turn, want ready from the Stop hook", r.State, r.StateSource, r.Evidence)
	}

	before := len(fake.Requests())
	t.Cleanup(func() {
		if t.Failed() {
			for _, q := range fake.Requests()[before:] {
				t.Logf("the fake model was asked: %+v", q)
			}
			if sc, err := c.Screen(context.Background(), a.Node, a.ID); err == nil {
				t.Logf("the agent's screen:\n%s", sc.Text)
			}
		}
	})
	if _, err := c.SendAgent(ctx, a.Node, a.ID, "bash: touch DENIED"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		for _, q := range fake.Requests()[before:] {
			if q.ToolError && q.Answer == "denied: touch DENIED" {
				return true
			}
		}
		return false
	}, "the denial to reach the model")
	wait(api.AgentReady)
	if _, err := os.Stat(filepath.Join(work, "DENIED")); err == nil {
		t.Fatal("a denied tool ran")
	}
	if _, err := c.KillAgent(ctx, a.Node, a.ID); err != nil {
		t.Fatal(err)
	}
}

// TestClaudeAgentSecretKey: an agent's model API key comes from a node secret
// (`--secret ANTHROPIC_API_KEY=NAME`), allowed by the policy's secrets; the
// agent uses it (the fake API sees it), and when the agent prints it, it is in
// no reply, screen, output, live stream, recording, audit record or listing
// (ls --json, agent ls --json), nor in any file of the data dir but the
// secret's own (the audit log, JetStream's streams, recordings).
func TestClaudeAgentSecretKey(t *testing.T) {
	claude := testutil.NeedClaudeCode(t)
	fake := testutil.StartFakeClaude(t)
	addr := startDev(t)
	key := "sk-ant-fake-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "0123456789abcdefKEYEND"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if err := runIO(ctx, []string{"secret", "set", "here", "anthropic"}, strings.NewReader(key+"\n"), &out, &errb); err != nil {
		t.Fatalf("secret set: %v %s", err, errb.String())
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	doc := `version: 1
rules:
  - name: agents-may-echo
    match: {agent: claude, tool: Bash, input: '^echo '}
    action: allow
secrets:
  - {name: anthropic, roles: [admin], programs: ['agent:claude']}
`
	if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errs, err := runArgs(t, "policy", "set", pol); err != nil {
		t.Fatalf("policy set: %v %s", err, errs)
	}
	c, err := client.New(client.Config{Addr: addr, Token: devAdminToken})
	if err != nil {
		t.Fatal(err)
	}
	env := testutil.ClaudeCodeEnvFor(fake)
	delete(env, "ANTHROPIC_API_KEY")
	var a api.Agent
	testutil.Eventually(t, 10*time.Second, func() bool { // the node applies the policy within a second
		a, err = c.SpawnAgent(ctx, api.SpawnRequest{Node: "here", Driver: api.DriverClaude, Program: claude, Cwd: t.TempDir(), Env: env,
			Secrets: map[string]string{"ANTHROPIC_API_KEY": "anthropic"}})
		return err == nil
	}, "the spawn with the secret: %v", err)
	spawned, _ := json.Marshal(a)
	if r, err := c.WaitAgent(ctx, a.Node, a.ID, []string{api.AgentReady}, 30000); err != nil || !r.OK {
		t.Fatalf("ready: %v %+v", err, r)
	}
	// The session's live stream, as `fleetmux logs -f` reads it.
	var stream testutil.Buffer
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		_, _ = c.Follow(fctx, a.Node, a.ID, 0, &stream)
	}()
	if _, err := c.SendAgent(ctx, a.Node, a.ID, "bash: echo KEY=$ANTHROPIC_API_KEY"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		for _, q := range fake.Requests() {
			if q.Answer == "ran: echo KEY=$ANTHROPIC_API_KEY" {
				return true
			}
		}
		return false
	}, "the agent to run echo")
	if r, err := c.WaitAgent(ctx, a.Node, a.ID, []string{api.AgentReady}, 30000); err != nil || !r.OK {
		t.Fatalf("ready: %v %+v", err, r)
	}
	used := false
	for _, q := range fake.Requests() {
		used = used || q.APIKey == key
	}
	if !used {
		t.Fatal("the agent did not use the key from the secret")
	}
	sc, err := c.Screen(ctx, a.Node, a.ID)
	if err != nil || !strings.Contains(sc.Text, "KEY=[REDACTED") {
		t.Fatalf("the screen does not show the key redacted (%v):\n%s", err, sc.Text)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return strings.Contains(stream.String(), "KEY=[REDACTED") }, "the live stream to show the key redacted")
	stopFollow()
	<-followed
	agents, _ := c.Agents(ctx, "")
	agentsJSON, _ := json.Marshal(agents)
	ls, _, _ := runArgs(t, "ls", "--json")
	agentLs, _, _ := runArgs(t, "agent", "ls", "--json")
	if !strings.Contains(agentLs, `"claude"`) || !strings.Contains(agentLs, `"`+a.ID+`"`) || !strings.Contains(ls, `"`+a.ID+`"`) {
		t.Fatalf("the listings do not show the agent:\n%s\n%s", agentLs, ls)
	}
	output, _ := c.AgentOutput(ctx, a.Node, a.ID, 0, 1<<20)
	outputJSON, _ := json.Marshal(output)
	if !slices.ContainsFunc(output.Turns, func(tr api.AgentTurn) bool {
		return tr.Kind == api.AgentTurnTool && strings.Contains(tr.Text, "KEY=[REDACTED")
	}) {
		t.Fatalf("the agent's turns do not show the tool's result, redacted: %+v", output.Turns)
	}
	var rec bytes.Buffer
	if err := c.Recording(ctx, a.Node, a.ID, 0, &rec); err != nil {
		t.Logf("recording: %v", err)
	}
	for what, b := range map[string][]byte{"the spawn's reply": spawned, "the screen": []byte(sc.Text), "the agents": agentsJSON,
		"ls --json": []byte(ls), "agent ls --json": []byte(agentLs), "the agent's output": outputJSON, "the recording": rec.Bytes(),
		"the live stream": []byte(stream.String())} {
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("%s shows the key", what)
		}
	}
	if _, err := c.KillAgent(ctx, a.Node, a.ID); err != nil {
		t.Fatal(err)
	}
	// Every file of the data dir (the audit log, JetStream's store of the
	// streams, recordings, the agent's config dir) but the secret's own.
	stored := 0
	err = filepath.WalkDir("data", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(p, "/secrets/") || d.Type()&os.ModeSocket != 0 {
			return nil
		}
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("%s holds the key", p)
		}
		if bytes.Contains(b, []byte("KEY=[REDACTED")) {
			stored++
		}
		return nil
	})
	if err != nil || stored == 0 {
		t.Fatalf("walking the data dir: %v; %d files hold the agent's output", err, stored)
	}
	// The audit log (walked above) has the spawn and the prompt.
	audit, err := os.ReadFile(filepath.Join("data", "audit.jsonl"))
	if err != nil || !bytes.Contains(audit, []byte(`"action":"POST /v1/agents","detail":"/v1/agents","result":"ok"`)) ||
		!bytes.Contains(audit, []byte(`"detail":"/v1/agents/here/`+a.ID+`/send","result":"ok"`)) {
		t.Fatalf("the audit log has not the spawn and the prompt (%v):\n%s", err, audit)
	}
}
