package httpapi_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/mcpserver"
	"github.com/fleetmux/fleetmux/node"
)

// swarmPolicy lets the workers run their tests and holds any other shell
// command for a person; the model key goes to claude agents only.
const swarmPolicy = `{"version": 1, "rules": [
  {"name": "workers-may-test", "match": {"agent": "claude", "tool": "Bash", "input": "^touch TESTED$"}, "action": "allow"},
  {"name": "shell-needs-a-human", "match": {"agent": "claude", "tool": "Bash"}, "action": "approve", "approve_within": "30m"},
  {"name": "default", "action": "allow"}],
 "secrets": [{"name": "anthropic", "roles": ["admin"], "programs": ["agent:claude"]}]}`

// TestMCPSwarm is docs/agents.md's swarm, run: an MCP client spawns a real
// Claude Code (pinned; against the fake Messages API) on each of two nodes, its
// key from a node secret; one worker's command the policy allows runs at once,
// the other's is held as an agent_tool approval (the worker waiting_permission,
// nothing run) until another admin approves it; both end ready, their turns
// read with read_agent_output; killing them ends them. MCP_DEBUG=1 logs every
// call and its result (the transcript in the docs).
func TestMCPSwarm(t *testing.T) {
	claude := testutil.NeedClaudeCode(t) // before the stack changes HOME
	self, err := testutil.BuildFleetmux(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fake := testutil.StartFakeClaude(t)
	for k, v := range testutil.ClaudeCodeEnvFor(fake) {
		if k != "ANTHROPIC_API_KEY" { // that one comes from the node secret
			t.Setenv(k, v) // the nodes' environment, which their sessions inherit
		}
	}
	nodes := map[string]map[string]string{"build-1": nil, "build-2": nil}
	f := newFixture(t, stack.Options{Nodes: nodes, Policy: true, Store: true, Node: func(c *node.Config) { c.Self = self }})
	const key = "sk-ant-fake-swarm-0123456789abcdefghij"
	for n := range nodes {
		f.Must(http.StatusOK, "PUT", "/v1/nodes/"+n+"/secrets/anthropic", api.SecretBody{Value: key}, nil)
	}
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(swarmPolicy), nil)
	alice := f.newToken("alice", api.RoleAdmin, "")
	c := mcpHTTP(t, f)
	work := map[string]string{"build-1": t.TempDir(), "build-2": t.TempDir()}

	// Spawn a worker on each node (once the nodes applied the policy).
	workers := map[string]mcpserver.Agent{}
	for _, n := range []string{"build-1", "build-2"} {
		args := map[string]any{"node": n, "driver": "claude", "program": claude, "cwd": work[n], "secrets": map[string]string{"ANTHROPIC_API_KEY": "anthropic"}}
		testutil.Eventually(t, 10*time.Second, func() bool {
			var a mcpserver.Agent
			text, isErr := c.try("spawn_agent", args, &a)
			if isErr && !strings.Contains(text, "(version 0)") {
				t.Fatalf("spawn_agent on %s: %s", n, text) // refused by the policy in force, not for its absence
			}
			if !isErr && strings.HasPrefix(text, "spawned ") {
				workers[n] = a
				return true
			}
			return false
		}, "spawn_agent on %s once the node applied the policy", n)
	}
	for _, n := range []string{"build-1", "build-2"} {
		if text := c.ok("wait_for_agent", map[string]any{"node": n, "agent": workers[n].ID, "state": "ready", "timeout_ms": 60000}, nil); !strings.HasPrefix(text, "ok true:") {
			t.Fatalf("wait_for_agent %s: %s", n, text)
		}
	}
	if text := c.ok("list_agents", map[string]any{}, nil); strings.Count(text, "(claude) ready") != 2 {
		t.Fatalf("list_agents: %s", text)
	}
	prompts := map[string]string{"build-1": "bash: touch TESTED", "build-2": "bash: touch RELEASED"}
	for _, n := range []string{"build-1", "build-2"} {
		c.ok("send_to_agent", map[string]any{"node": n, "agent": workers[n].ID, "text": prompts[n]}, nil)
	}

	// build-1's command the policy allows: it runs, the worker is ready again.
	w1 := map[string]any{"node": "build-1", "agent": workers["build-1"].ID, "state": "ready,waiting_permission", "timeout_ms": 60000}
	if text := c.ok("wait_for_agent", w1, nil); !strings.Contains(text, "ready from hook") {
		t.Fatalf("wait_for_agent build-1: %s", text)
	}
	if _, err := os.Stat(filepath.Join(work["build-1"], "TESTED")); err != nil {
		t.Fatalf("the allowed command did not run: %v", err)
	}
	// build-2's is held for a person: the worker waits, nothing ran.
	w2 := map[string]any{"node": "build-2", "agent": workers["build-2"].ID, "state": "ready,waiting_permission", "timeout_ms": 60000}
	if text := c.ok("wait_for_agent", w2, nil); !strings.Contains(text, `waiting_permission from hook "PermissionRequest Bash`) {
		t.Fatalf("wait_for_agent build-2: %s", text)
	}
	var list api.ApprovalList
	f.Must(http.StatusOK, "GET", "/v1/approvals?state=pending", nil, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].Kind != api.ApprovalAgentTool || list.Approvals[0].Command != "touch RELEASED" {
		t.Fatalf("pending approvals: %+v", list.Approvals)
	}
	if _, err := os.Stat(filepath.Join(work["build-2"], "RELEASED")); err == nil {
		t.Fatal("the held command ran before anyone approved it")
	}
	ap := list.Approvals[0]
	// The token that spawned the worker may not approve its tool use; alice may.
	f.APIErr(http.StatusForbidden, api.CodeForbidden, "POST", "/v1/approvals/"+ap.Node+"/"+ap.ID, api.DecideBody{Decision: api.DecisionApprove})
	f.as(alice, func() {
		f.Must(http.StatusOK, "POST", "/v1/approvals/"+ap.Node+"/"+ap.ID, api.DecideBody{Decision: api.DecisionApprove, Reason: "release notes are fine"}, nil)
	})
	w2["state"] = "ready"
	if text := c.ok("wait_for_agent", w2, nil); !strings.Contains(text, "ready from hook") {
		t.Fatalf("wait_for_agent build-2 after the approval: %s", text)
	}
	if _, err := os.Stat(filepath.Join(work["build-2"], "RELEASED")); err != nil {
		t.Fatalf("approved, the command did not run: %v", err)
	}
	for _, n := range []string{"build-1", "build-2"} {
		// (Claude Code may draw its last answer just after its Stop hook.)
		var text string
		testutil.Eventually(t, 10*time.Second, func() bool {
			text = c.ok("read_agent_output", map[string]any{"node": n, "agent": workers[n].ID}, nil)
			return strings.Contains(text, "ran: "+strings.TrimPrefix(prompts[n], "bash: "))
		}, "read_agent_output %s to show the answer", n)
		if strings.Contains(text, key) {
			t.Fatalf("read_agent_output %s shows the key", n)
		}
	}
	for _, n := range []string{"build-1", "build-2"} {
		if text := c.ok("kill_agent", map[string]any{"node": n, "agent": workers[n].ID}, nil); !strings.Contains(text, "killed") {
			t.Fatalf("kill_agent %s: %s", n, text)
		}
	}
	used := 0
	for _, q := range fake.Requests() {
		if q.APIKey == key {
			used++
		}
	}
	if used == 0 {
		t.Fatal("the workers did not use the key from the node secret")
	}
}
