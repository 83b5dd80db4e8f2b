package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/agent"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/node"
)

// agentEvents are the agent events of one stack's NATS server, as a subscriber
// receives them, each with the time it arrived.
type agentEvents chan agentArrival

type agentArrival struct {
	ev api.AgentEvent
	at time.Time
}

func watchAgentEvents(t *testing.T, f *stack.Stack) agentEvents {
	t.Helper()
	nc, err := nats.Connect(f.NATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ch := make(agentEvents, 4096)
	sub, err := nc.Subscribe(api.Subjects{}.All(api.KindAgent, "*"), func(m *nats.Msg) {
		at := time.Now()
		var e api.AgentEvent
		if json.Unmarshal(m.Data, &e) == nil {
			select {
			case ch <- agentArrival{e, at}:
			default: // the report reads as fast as events come; never block the client
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// next waits (at most d) for agent a's state event of state, and returns when it
// arrived; events before it are dropped.
func (ch agentEvents) next(t *testing.T, a api.Agent, state string, d time.Duration) (time.Time, api.AgentEvent) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case got := <-ch:
			if got.ev.Node == a.Node && got.ev.Agent == a.ID && got.ev.Type == api.AgentEventState && got.ev.State == state {
				return got.at, got.ev
			}
		case <-timeout:
			t.Fatalf("agent %s: no %s event within %v", a.Address(), state, d)
		}
	}
}

// drain drops the events received so far.
func (ch agentEvents) drain() {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// agentHookDir is the hook channel's directory of the only claude agent of a
// node whose data dir is data.
func agentHookDir(t *testing.T, data string) string {
	t.Helper()
	var dirs []os.DirEntry
	testutil.Eventually(t, 10*time.Second, func() bool {
		dirs, _ = os.ReadDir(filepath.Join(data, "agents"))
		return len(dirs) == 1
	}, "one agent config dir")
	return filepath.Join(data, "agents", dirs[0].Name())
}

// buildFakeTUI builds agent/testdata/faketui, the fake coding-agent TUI.
func buildFakeTUI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "faketui")
	cmd := exec.Command("go", "build", "-o", bin, "../agent/testdata/faketui")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build faketui: %v\n%s", err, out)
	}
	return bin
}

func pcts(ds []time.Duration) string {
	return fmt.Sprintf("%.1f ms | %.1f ms | %.1f ms", micros(percentile(ds, 50))/1000, micros(percentile(ds, 95))/1000, micros(percentile(ds, 100))/1000)
}

// TestAgentBenchReport measures what issue "coding agents" targets, on one
// node of a real stack (controller, node agent, embedded nats-server), each as
// p50/p95/max:
//
//   - hook → NATS event: a claude agent's hook events, UserPromptSubmit and Stop
//     in turn, from the start of `fleetmux agent-hook DIR` (the program Claude
//     Code runs for each hook, exec'd with the event on its stdin) — and from
//     agent.SendHook in-process, the channel alone — until a NATS subscriber of
//     fleetmux.agent.> holds the event of the state it makes. Target p95 ≤ 250 ms.
//   - screen-only detection: the fake TUI (agent/testdata/faketui) drawing Claude
//     Code's screens, no hooks: from `agent send` returning (its Enter typed)
//     until the subscriber holds working, and from `agent interrupt` returning
//     until it holds ready. Target p95 ≤ 1 s.
//   - spawn → ready: the real Claude Code (pinned; skipped when not installed)
//     against the fake Messages API, its config prepared by the node: from POST
//     /v1/agents until the subscriber holds ready. Target ≤ 5 s.
func TestAgentBenchReport(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the agent report (about a minute)")
	}
	rounds := envInt(t, "FLEETMUX_BENCH_AGENT_ROUNDS", 50)
	spawns := envInt(t, "FLEETMUX_BENCH_AGENT_SPAWNS", 5)
	claudePath := os.Getenv(testutil.ClaudeCodeEnv) // before the stack changes HOME
	if claudePath == "" {
		claudePath = filepath.Join(testutil.ClaudeCodePrefix(), "node_modules", ".bin", "claude")
	}
	loadAvg := loadAverage()
	self, err := testutil.BuildFleetmux(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tui := buildFakeTUI(t)
	data := t.TempDir()
	f := stack.New(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Node: func(c *node.Config) { c.DataDir, c.Self = data, self }})
	ev := watchAgentEvents(t, f)
	spawn := func(r api.SpawnRequest) api.Agent {
		r.Node = "n1"
		var a api.Agent
		f.Must(http.StatusCreated, "POST", "/v1/agents", r, &a)
		return a
	}
	kill := func(a api.Agent) { f.Must(http.StatusOK, "DELETE", "/v1/agents/"+a.Node+"/"+a.ID, nil, nil) }

	// Hooks: a claude agent whose program only sleeps (its screen shows nothing a
	// rule reads), so that every state it has comes from its hooks.
	var hookExec, hookChan []time.Duration
	{
		a := spawn(api.SpawnRequest{Driver: api.DriverClaude, Program: "sleep", Args: []string{"3600"}})
		dir := agentHookDir(t, data)
		events := []struct{ name, state string }{{"UserPromptSubmit", api.AgentWorking}, {"Stop", api.AgentReady}}
		for i := range 10 + rounds {
			e := events[i%2]
			body := []byte(`{"hook_event_name":"` + e.name + `"}`)
			ev.drain()
			t0 := time.Now()
			if i%4 < 2 { // the hook program, as Claude Code runs it
				cmd := exec.Command(self, "agent-hook", dir)
				cmd.Stdin = bytes.NewReader(body)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("agent-hook: %v %s", err, out)
				}
			} else if _, err := agent.SendHook(context.Background(), dir, body); err != nil {
				t.Fatal(err)
			}
			at, _ := ev.next(t, a, e.state, 5*time.Second)
			if i < 10 {
				continue // warm-up
			}
			if i%4 < 2 {
				hookExec = append(hookExec, at.Sub(t0))
			} else {
				hookChan = append(hookChan, at.Sub(t0))
			}
		}
		kill(a)
	}

	// The screen alone: the fake TUI works until interrupted.
	var scrWork, scrReady []time.Duration
	{
		a := spawn(api.SpawnRequest{Driver: api.DriverClaude, Program: tui, Args: []string{"-driver", "claude", "-busy", "1h"}})
		var w api.AgentWaitReply
		f.Must(http.StatusOK, "GET", "/v1/agents/n1/"+a.ID+"/wait?state=ready&timeout_ms=10000", nil, &w)
		if !w.OK {
			t.Fatalf("the fake TUI is not ready: %+v", w.Agent)
		}
		p := "/v1/agents/n1/" + a.ID
		for i := range 3 + rounds {
			ev.drain()
			f.Must(http.StatusOK, "POST", p+"/send", api.AgentSendBody{Text: fmt.Sprintf("task %d", i)}, nil)
			t0 := time.Now()
			at, e := ev.next(t, a, api.AgentWorking, 5*time.Second)
			if e.Source != api.SourceScreen {
				t.Fatalf("working from %s, want screen", e.Source)
			}
			if i >= 3 {
				scrWork = append(scrWork, at.Sub(t0))
			}
			f.Must(http.StatusOK, "POST", p+"/interrupt", nil, nil)
			t0 = time.Now()
			at, _ = ev.next(t, a, api.AgentReady, 5*time.Second)
			if i >= 3 {
				scrReady = append(scrReady, at.Sub(t0))
			}
		}
		kill(a)
	}

	// Spawn → ready: the real Claude Code against the fake API.
	var spawnReady []time.Duration
	skipSpawn := ""
	if _, err := os.Stat(claudePath); err != nil {
		skipSpawn = fmt.Sprintf("skipped: Claude Code %s is not installed at %s (npm install --prefix %s @anthropic-ai/claude-code@%s)",
			testutil.ClaudeCodeVersion, claudePath, testutil.ClaudeCodePrefix(), testutil.ClaudeCodeVersion)
		t.Log(skipSpawn)
	} else {
		fake := testutil.StartFakeClaude(t)
		for range spawns {
			work := t.TempDir()
			ev.drain()
			t0 := time.Now()
			a := spawn(api.SpawnRequest{Driver: api.DriverClaude, Program: claudePath, Cwd: work, Env: testutil.ClaudeCodeEnvFor(fake)})
			at, _ := ev.next(t, a, api.AgentReady, 30*time.Second)
			spawnReady = append(spawnReady, at.Sub(t0))
			kill(a)
		}
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, %d CPUs (nproc), %s %s/%s, load average before: %s\n\n", time.Now().Format("2006-01-02"),
		runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, loadAvg)
	fmt.Fprintf(&out, "| measure | n | p50 | p95 | max | target |\n|---|---:|---:|---:|---:|---|\n")
	fmt.Fprintf(&out, "| hook → NATS event (`fleetmux agent-hook` exec'd) | %d | %s | p95 ≤ 250 ms |\n", len(hookExec), pcts(hookExec))
	fmt.Fprintf(&out, "| hook → NATS event (the channel alone) | %d | %s | |\n", len(hookChan), pcts(hookChan))
	fmt.Fprintf(&out, "| screen only: send → working | %d | %s | p95 ≤ 1 s |\n", len(scrWork), pcts(scrWork))
	fmt.Fprintf(&out, "| screen only: interrupt → ready | %d | %s | p95 ≤ 1 s |\n", len(scrReady), pcts(scrReady))
	if skipSpawn == "" {
		fmt.Fprintf(&out, "| spawn → ready (Claude Code %s) | %d | %s | ≤ 5 s |\n", testutil.ClaudeCodeVersion, len(spawnReady), pcts(spawnReady))
	} else {
		fmt.Fprintf(&out, "| spawn → ready | — | %s | | | |\n", skipSpawn)
	}
	fmt.Print(out.String())
}
