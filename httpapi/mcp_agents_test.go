package httpapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/mcpserver"
)

// TestMCPAgents drives an agent through every agent tool over /mcp: a script that
// draws aider's prompt stands in for aider, so its state comes from the aider
// driver's screen rules.
func TestMCPAgents(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	prog := filepath.Join(t.TempDir(), "fake-aider")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nprintf 'Aider v0\\n> '\nexec cat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := mcpHTTP(t, f)
	var a mcpserver.Agent
	text := c.ok("spawn_agent", map[string]any{"node": "n1", "driver": "aider", "program": prog}, &a)
	if a.Node != "n1" || a.ID == "" || !strings.Contains(text, "spawned n1/"+a.ID+" (aider)") {
		t.Fatalf("spawn_agent: %q %+v", text, a)
	}
	args := map[string]any{"node": "n1", "agent": a.ID}
	text = c.ok("wait_for_agent", map[string]any{"node": "n1", "agent": a.ID, "state": "ready", "timeout_ms": 10000}, &a)
	if a.State != "ready" || !strings.HasPrefix(text, "ok true:") || !strings.Contains(text, "from screen") {
		t.Fatalf("wait_for_agent: %q", text)
	}
	if text := c.ok("list_agents", map[string]any{}, nil); !strings.Contains(text, "n1/"+a.ID+" (aider) ready") {
		t.Fatalf("list_agents: %q", text)
	}
	c.ok("send_to_agent", map[string]any{"node": "n1", "agent": a.ID, "text": "add the tests"}, nil)
	raw := c.okRaw("read_agent_output", args, nil)
	if !strings.Contains(raw, "<<<output ") || !strings.Contains(raw, "<<<screen ") {
		t.Fatalf("read_agent_output does not fence what the program printed: %q", raw)
	}
	c.fail("wait_for_agent", map[string]any{"node": "n1", "agent": a.ID, "state": "sleeping"}, "sleeping")
	c.fail("send_to_agent", map[string]any{"node": "n1", "agent": "n1/" + a.ID, "text": "x"}, "agent")
	c.ok("interrupt_agent", args, nil)
	if text := c.ok("kill_agent", args, nil); !strings.Contains(text, "killed n1/"+a.ID) {
		t.Fatalf("kill_agent: %q", text)
	}
	c.fail("kill_agent", args, "no agent n1/"+a.ID, "list_agents")
}
