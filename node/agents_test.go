package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// tinyAgent is a generic-driver agent: sh printing a prompt, then cat.
var tinyAgent = api.SpawnRequest{Driver: api.DriverGeneric, Program: "sh", Args: []string{"-c", "printf 'READY> '; exec cat"},
	Rules: "version 1\nname tiny/1\nrule prompt ready -- READY>\n"}

// TestAgentAcrossRestart: with a holder, an agent outlives its node agent as its
// session does: the next node agent tracks it again (driver, rules, parent, the
// time it was spawned), reads its state again from its screen, and prompts it.
func TestAgentAcrossRestart(t *testing.T) {
	client := startHolder(t)
	f := newFixture(t, func(c *node.Config) { c.Holder = client() })
	var a api.Agent
	f.mustCall(api.VerbAgentSpawn, tinyAgent, &a)
	var w api.AgentWaitReply
	f.mustCall(api.VerbAgentWait, api.AgentWaitRequest{Agent: a.ID, States: []string{api.AgentReady}, TimeoutMS: 10000}, &w)
	if !w.OK {
		t.Fatalf("not ready before the restart: %+v", w.Agent)
	}
	f.restart(client(), 0, 1)
	var b api.Agent
	f.mustCall(api.VerbAgentGet, api.AgentRequest{Agent: a.ID}, &b)
	if b.Driver != a.Driver || b.Rules != "tiny/1" || b.Parent != a.Parent || !b.CreatedAt.Equal(a.CreatedAt) || b.Owner != a.Owner {
		t.Fatalf("after the restart %+v, before %+v", b, a)
	}
	f.mustCall(api.VerbAgentWait, api.AgentWaitRequest{Agent: a.ID, States: []string{api.AgentReady}, TimeoutMS: 10000}, &w)
	if !w.OK || w.Agent.StateSource != api.SourceScreen {
		t.Fatalf("not ready from its screen after the restart: %+v", w.Agent)
	}
	f.mustCall(api.VerbAgentSend, api.AgentSendRequest{Agent: a.ID, Text: "after the restart"}, nil)
	testutil.Eventually(t, 10*time.Second, func() bool {
		var out api.AgentOutput
		return f.call(api.VerbAgentOutput, api.AgentOutputRequest{Agent: a.ID}, &out) == nil && strings.Contains(out.Text, "after the restart")
	}, "the prompt typed after the restart")
}

// TestAgentCap: usage a hook reports past the agent's cap marks it error with
// the reason (from the hook) and interrupts it (the generic driver's C-c ends
// cat, and with it the session); error stays.
func TestAgentCap(t *testing.T) {
	f := newFixture(t)
	req := tinyAgent
	req.Caps = &api.AgentCaps{MaxTurns: 2}
	var a api.Agent
	f.mustCall(api.VerbAgentSpawn, req, &a)
	var w api.AgentWaitReply
	f.mustCall(api.VerbAgentWait, api.AgentWaitRequest{Agent: a.ID, States: []string{api.AgentReady}, TimeoutMS: 10000}, &w)
	if !w.OK {
		t.Fatalf("not ready: %+v", w.Agent)
	}
	tr := f.node.Agents()
	if err := tr.SetUsage(a.ID, api.SourceHook, api.AgentUsage{Turns: 2}); err != nil {
		t.Fatal(err)
	}
	if got, _ := tr.Get(a.ID); got.State != api.AgentReady || got.Usage == nil || got.Usage.Turns != 2 {
		t.Fatalf("at its cap: %+v", got)
	}
	if err := tr.SetUsage(a.ID, api.SourceHook, api.AgentUsage{Turns: 3}); err != nil {
		t.Fatal(err)
	}
	got, _ := tr.Get(a.ID)
	if got.State != api.AgentError || got.StateSource != api.SourceHook || !strings.Contains(got.Evidence, "max_turns 2") {
		t.Fatalf("past its cap: %+v", got)
	}
	var s api.WaitReply
	f.mustCall("wait", api.WaitRequest{Session: a.ID, Until: api.UntilExited, TimeoutMS: 10000}, &s)
	if !s.OK {
		t.Fatalf("the agent past its cap was not interrupted: %+v", s.Session)
	}
	f.mustCall(api.VerbAgentGet, api.AgentRequest{Agent: a.ID}, &got)
	if got.State != api.AgentError {
		t.Fatalf("after its exit: %s (%s)", got.State, got.Evidence)
	}
	var e api.Agent
	bad := tinyAgent
	bad.Caps = &api.AgentCaps{MaxTurns: -1}
	if err := f.call(api.VerbAgentSpawn, bad, &e); err == nil {
		t.Fatal("negative caps taken")
	}
}

// TestAgentSandboxAsked: a spawn's sandbox is asked for as a create's is: a
// profile the policy does not have is refused, and nothing starts.
func TestAgentSandboxAsked(t *testing.T) {
	f := newFixture(t)
	req := tinyAgent
	req.Sandbox = "no-such-profile"
	var a api.Agent
	err := f.call(api.VerbAgentSpawn, req, &a)
	var l api.AgentList
	f.mustCall(api.VerbAgentList, nil, &l)
	if err == nil || !strings.Contains(err.Error(), "no-such-profile") || len(l.Agents) != 0 {
		t.Fatalf("spawn with an unknown sandbox: %v, agents %+v", err, l.Agents)
	}
}

// TestAgentDefaultSandbox: an agent spawned without a profile gets the policy's
// agent_default; a plain session of the same principal gets none.
func TestAgentDefaultSandbox(t *testing.T) {
	if sandbox.Probe().Landlock < 4 {
		t.Skip("needs Landlock ABI >= 4")
	}
	work := t.TempDir()
	src := &docSource{rev: 1, doc: []byte(`version: 1
rules:
  - name: default
    action: allow
sandboxes:
  profiles:
    agentbox:
      files: {write: [` + work + `]}
      network: {connect_tcp: [443]}
  default: none
  agent_default: agentbox
`)}
	f := newFixture(t, func(c *node.Config) { c.Policy = src })
	req := tinyAgent
	req.Cwd = work
	var a api.Agent
	f.mustCall(api.VerbAgentSpawn, req, &a)
	var s api.Session
	f.mustCall("get", api.SessionRequest{Session: a.ID}, &s)
	if s.Sandbox == nil || s.Sandbox.Name != "agentbox" {
		t.Fatalf("the agent's session: sandbox %+v", s.Sandbox)
	}
	if p := f.create(api.CreateRequest{Shell: "bash", Cwd: work}); p.Sandbox != nil {
		t.Fatalf("a plain session: sandbox %+v", p.Sandbox)
	}
}
