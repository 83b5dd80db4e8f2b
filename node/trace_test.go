package node_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestClaudeTurnTraced: the real Claude Code, spawned as an agent and prompted to
// run a command, gives an invoke_agent span for its turn and an execute_tool
// span for its Bash call under it (GenAI conventions), from its hooks.
func TestClaudeTurnTraced(t *testing.T) {
	claude := testutil.NeedClaudeCode(t) // before the fixture changes HOME
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), tracing.Config{Service: "node-test", Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	bin, err := testutil.BuildFleetmux(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fake := testutil.StartFakeClaude(t)
	src := &docSource{rev: 1, doc: []byte("version: 1\nrules:\n  - name: default\n    action: allow\n")}
	f := newFixture(t, func(c *node.Config) { c.Policy, c.Self = src, bin })
	work := t.TempDir()
	var a api.Agent
	f.mustCall(api.VerbAgentSpawn, api.SpawnRequest{Driver: api.DriverClaude, Program: claude, Cwd: work, Env: testutil.ClaudeCodeEnvFor(fake)}, &a)
	f.waitAgent(a.ID, api.AgentReady)
	f.mustCall(api.VerbAgentSend, api.AgentSendRequest{Agent: a.ID, Text: "bash: touch MARKER"}, nil)
	testutil.Eventually(t, 60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(work, "MARKER"))
		return err == nil
	}, "the agent's command to run")
	var turn, tool sdktrace.ReadOnlySpan
	testutil.Eventually(t, 60*time.Second, func() bool {
		turn, tool = nil, nil
		for _, s := range exp.GetSpans().Snapshots() {
			switch s.Name() {
			case "invoke_agent " + api.DriverClaude:
				turn = s
			case "execute_tool Bash":
				tool = s
			}
		}
		return turn != nil && tool != nil
	}, "the turn's and the tool call's spans")
	if tool.Parent().SpanID() != turn.SpanContext().SpanID() || tool.SpanContext().TraceID() != turn.SpanContext().TraceID() {
		t.Fatalf("execute_tool Bash is not under invoke_agent: parent %v, turn %v", tool.Parent(), turn.SpanContext())
	}
	for _, kv := range turn.Attributes() {
		if kv.Key == "gen_ai.agent.id" && kv.Value.AsString() != a.ID {
			t.Errorf("gen_ai.agent.id %q, want %s", kv.Value.AsString(), a.ID)
		}
	}
}
