package node_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/agent"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestHookCannotEndAgent performs the attack of a program the agent runs (its
// Bash tool, which may read the hook channel's token in $CLAUDE_CONFIG_DIR) on
// its own agent: it reports a SessionEnd hook event while Claude Code runs on.
// A final state reported by a hook was final for good: the agent showed
// exited while it worked, its usage caps were no longer enforced (a cap is
// checked only on an agent that has not ended) and the controller stopped
// counting it among its parent's children. Now exited comes only from the
// process, as DESIGN says.
func TestHookCannotEndAgent(t *testing.T) {
	f, fake, claude := claudeFixture(t)
	var a api.Agent
	f.mustCall(api.VerbAgentSpawn, api.SpawnRequest{Driver: api.DriverClaude, Program: claude, Cwd: t.TempDir(), Env: testutil.ClaudeCodeEnvFor(fake)}, &a)
	f.waitAgent(a.ID, api.AgentReady)
	dirs, err := filepath.Glob(filepath.Join(f.data, "agents", "*", agent.HookToken))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("the agent's hook channel: %v %v", dirs, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Answered once the node has taken the event in.
	if _, err := agent.SendHook(ctx, filepath.Dir(dirs[0]), []byte(`{"hook_event_name":"SessionEnd","reason":"other"}`)); err != nil {
		t.Fatalf("send the forged hook event: %v", err)
	}
	var got api.Agent
	f.mustCall(api.VerbAgentGet, api.AgentRequest{Agent: a.ID}, &got)
	if api.AgentFinal(got.State) {
		t.Fatalf("a hook event ended a running agent: %s from %s (%q)", got.State, got.StateSource, got.Evidence)
	}
	if _, err := os.Stat(dirs[0]); err != nil {
		t.Fatalf("the hook channel went with the forged end: %v", err)
	}
}
