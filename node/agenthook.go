package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/agent"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
)

// Claude Code hooks (package agent, hook.go and hookwire.go): a claude agent
// runs with a config directory of its own (CLAUDE_CONFIG_DIR, under the node's
// data dir) whose settings run `fleetmux agent-hook DIR` for every hook event;
// the node serves the agent's hook channel in DIR. Each event becomes a state of
// the agent (source hook, its name the evidence); a PermissionRequest is decided
// by the policy (guard.CheckTool) as the agent's spawner: allow and deny answer
// at once, approve holds it as an approval of kind agent_tool until a person
// decides, the hook waiting. A tool use no rule of the policy names is left to
// the CLI, which asks at its own dialog as it would (the screen then says
// waiting_permission): fleetmux widens no agent's permissions by itself.

// agentHooksDir is where the agents' config directories are, under the data dir.
const agentHooksDir = "agents"

// EnvClaudeConfig is Claude Code's config directory variable.
const EnvClaudeConfig = "CLAUDE_CONFIG_DIR"

// agentHooks are the node's open hook channels, by session id, and the
// permission requests their agents wait on.
type agentHooks struct {
	mu    sync.Mutex
	m     map[string]*agent.HookChannel
	waits map[string]map[*toolWaiting]bool // by session id
}

// toolWaiting is one permission request an agent waits on.
type toolWaiting struct {
	cancel context.CancelFunc
	// interrupted: the agent was interrupted while it waited (agent_interrupt);
	// set before cancel.
	interrupted atomic.Bool
}

// turnEvents end whatever permission request the agent still had pending: a new
// turn, the end of one, a new or ended session. (Claude Code does not stop the
// hook when its own dialog is cancelled.)
var turnEvents = map[string]bool{"UserPromptSubmit": true, "Stop": true, "SessionStart": true, "SessionEnd": true}

// toolWait registers a permission request of agent id that waits; toolWaitsEnd
// ends it. The returned func unregisters it.
func (n *Node) toolWait(id string, w *toolWaiting) func() {
	n.hooks.mu.Lock()
	if n.hooks.waits == nil {
		n.hooks.waits = map[string]map[*toolWaiting]bool{}
	}
	if n.hooks.waits[id] == nil {
		n.hooks.waits[id] = map[*toolWaiting]bool{}
	}
	n.hooks.waits[id][w] = true
	n.hooks.mu.Unlock()
	return func() {
		n.hooks.mu.Lock()
		delete(n.hooks.waits[id], w)
		if len(n.hooks.waits[id]) == 0 {
			delete(n.hooks.waits, id)
		}
		n.hooks.mu.Unlock()
	}
}

// toolWaitsEnd ends the permission requests agent id waits on: it was
// interrupted, or moved on (a new turn); their approvals expire, nothing of them
// runs.
func (n *Node) toolWaitsEnd(id string, interrupted bool) {
	n.hooks.mu.Lock()
	waits := n.hooks.waits[id]
	delete(n.hooks.waits, id)
	n.hooks.mu.Unlock()
	for w := range waits {
		w.interrupted.Store(interrupted)
		w.cancel()
	}
}

// hookPrep is a hook channel made for an agent about to start.
type hookPrep struct {
	ch *agent.HookChannel
}

// prepareHooks makes the config directory and hook channel of a new agent of
// driver d (claude only; nil for others) and points cr's environment at it. A
// spawn that sets CLAUDE_CONFIG_DIR itself keeps its own (no hooks: the screen
// tells the states).
func (n *Node) prepareHooks(d *agent.Driver, cr *api.CreateRequest) (*hookPrep, error) {
	if d.Name != api.DriverClaude {
		return nil, nil
	}
	if _, own := cr.Env[EnvClaudeConfig]; own {
		return nil, nil
	}
	exe := n.cfg.Self
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	data, err := filepath.Abs(n.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	dir := filepath.Join(data, agentHooksDir, hex.EncodeToString(raw[:]))
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	work := cr.Cwd
	if work == "" {
		if work, err = os.UserHomeDir(); err != nil {
			work = "/"
		}
	}
	if work, err = filepath.Abs(work); err != nil {
		return nil, err
	}
	ch, err := agent.OpenHookChannel(dir, n.log)
	if err != nil {
		return nil, err
	}
	var tail string
	if k := cr.Env["ANTHROPIC_API_KEY"]; len(k) >= 20 {
		tail = k[len(k)-20:]
	}
	if err := agent.WriteClaudeConfig(agent.ClaudeConfig{Dir: dir, Workdir: work, Hook: []string{exe, "agent-hook", dir}, KeyTail: tail}); err != nil {
		ch.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	env := make(map[string]string, len(cr.Env)+1)
	for k, v := range cr.Env {
		env[k] = v
	}
	env[EnvClaudeConfig] = dir
	cr.Env = env
	return &hookPrep{ch: ch}, nil
}

// abort drops a prepared channel whose agent did not start.
func (p *hookPrep) abort() {
	if p == nil {
		return
	}
	p.ch.Close()
	os.RemoveAll(p.ch.Dir())
}

// startHooks serves the prepared channel for agent e (driver, spawned by w).
func (n *Node) startHooks(p *hookPrep, e *entry, driver string, w guard.Writer) {
	if p == nil {
		return
	}
	n.hooks.mu.Lock()
	if n.hooks.m == nil {
		n.hooks.m = map[string]*agent.HookChannel{}
	}
	n.hooks.m[e.id] = p.ch
	n.hooks.mu.Unlock()
	p.ch.Serve(n.hookHandler(e, driver, w))
}

// stopHooks closes agent id's hook channel (its session closed), if it has one.
func (n *Node) stopHooks(id string) {
	n.endAgentSpans(id)
	n.hooks.mu.Lock()
	ch := n.hooks.m[id]
	delete(n.hooks.m, id)
	n.hooks.mu.Unlock()
	if ch != nil {
		ch.Close()
		os.RemoveAll(ch.Dir())
	}
}

// closeHooks closes every hook channel (the node stops). Their directories stay:
// the agents may outlive the node agent (a holder).
func (n *Node) closeHooks() {
	n.hooks.mu.Lock()
	m := n.hooks.m
	n.hooks.m = nil
	n.hooks.mu.Unlock()
	for _, ch := range m {
		ch.Close()
	}
}

// hookHandler turns agent e's hook events into its states and decides its
// permission requests.
func (n *Node) hookHandler(e *entry, driver string, w guard.Writer) agent.HookHandler {
	signal := func(ctx context.Context, state, evidence string) {
		err := n.agents.Signal(ctx, e.id, api.AgentSignal{Source: api.SourceHook, State: state, Evidence: evidence, Time: time.Now().UTC()})
		if err != nil && !errors.Is(err, agent.ErrNoAgent) {
			n.log.Warn("agent hook: signal", "session", e.id, "err", err)
		}
	}
	// answered: the CLI's dialog beside this hook is answered with it.
	answered := func() {
		if err := n.agents.Answered(e.id, time.Now().UTC()); err != nil && !errors.Is(err, agent.ErrNoAgent) {
			n.log.Warn("agent hook: answered", "session", e.id, "err", err)
		}
	}
	turn := func(tr api.AgentTurn) {
		tr.Input, tr.Text = n.guard.RedactText(tr.Input), n.guard.RedactText(tr.Text)
		if err := n.agents.AddTurn(e.id, tr); err != nil && !errors.Is(err, agent.ErrNoAgent) {
			n.log.Warn("agent hook: turn", "session", e.id, "err", err)
		}
	}
	return func(ctx context.Context, ev agent.HookEvent, raw []byte) []byte {
		n.traceHook(e.id, driver, ev)
		if turnEvents[ev.Name] {
			n.toolWaitsEnd(e.id, false)
		}
		switch {
		case ev.Name == "UserPromptSubmit" && ev.Prompt != "":
			turn(api.AgentTurn{Kind: api.AgentTurnPrompt, Text: ev.Prompt})
		case ev.Name == "PostToolUse":
			turn(api.AgentTurn{Kind: api.AgentTurnTool, Tool: ev.ToolName, Input: agent.ToolInputText(ev.ToolName, ev.ToolInput), Text: agent.ToolResponseText(ev.ToolResponse)})
		case ev.Name == "Stop" && ev.LastAnswer != "":
			turn(api.AgentTurn{Kind: api.AgentTurnAnswer, Text: ev.LastAnswer})
		}
		state, evidence, ok := agent.HookState(ev)
		if ev.Name != "PermissionRequest" {
			if ok {
				signal(ctx, state, evidence)
			}
			return nil
		}
		// waiting_permission only once it waits for someone: a request the
		// policy allows or denies at once never is (a waiter for
		// waiting_permission would wake for nothing).
		waits := func() {
			if ok {
				signal(ctx, state, evidence)
			}
		}
		hookCtx := ctx
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		waiting := &toolWaiting{cancel: cancel}
		defer n.toolWait(e.id, waiting)()
		u := guard.ToolUse{Agent: driver, Tool: agent.Cut(ev.ToolName, 128), Input: agent.ToolInputText(ev.ToolName, ev.ToolInput), Held: waits}
		err := n.guard.CheckTool(ctx, e.guard, w, u)
		switch {
		case errors.Is(err, guard.ErrToolUndecided):
			waits()
			return nil // the CLI asks at its own dialog
		case hookCtx.Err() != nil:
			return nil // the hook gave up: nobody reads the answer
		case ctx.Err() != nil:
			// Interrupted, or the agent moved on, while it waited: denied. No
			// answer would leave the CLI's own dialog up, where any Enter typed
			// into the session (the next prompt's) says yes. No state either:
			// what moved it on said its own (a new turn's hook; the interrupt
			// hands over to the screen, Tracker.Interrupted), and a "working"
			// here, after it, would be stale at once.
			answered()
			why := "the agent moved on while this waited for approval"
			if waiting.interrupted.Load() {
				why = "the agent was interrupted while this waited for approval"
			}
			return agent.PermissionAnswer(false, "fleetmux: "+why)
		case err == nil:
			answered()
			signal(ctx, api.AgentWorking, "PermissionRequest "+u.Tool+" allowed")
			return agent.PermissionAnswer(true, "")
		}
		answered()
		msg := err.Error()
		var ae *api.Error
		if errors.As(err, &ae) {
			msg = ae.Message
		}
		signal(ctx, api.AgentWorking, "PermissionRequest "+u.Tool+" denied")
		return agent.PermissionAnswer(false, "fleetmux: "+msg)
	}
}
