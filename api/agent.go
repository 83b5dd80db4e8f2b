package api

import (
	"slices"
	"strings"
	"time"
)

// Agents (DESIGN "Agents"): a session whose program is a coding-agent CLI run by
// a driver. The node tracks each agent's state from the sources below and
// publishes every change on <prefix>.agent.<node>.<id> (AgentEvent).

// Agent states (Agent.State): spawning → booting → ready ⇄ working →
// waiting_permission | waiting_input → done | error | exited.
const (
	AgentSpawning          = "spawning"           // the node is starting its session
	AgentBooting           = "booting"            // the program runs; it has not shown its composer yet
	AgentReady             = "ready"              // it waits for a prompt
	AgentWorking           = "working"            // it works on a prompt
	AgentWaitingPermission = "waiting_permission" // it asks to be allowed to use a tool
	AgentWaitingInput      = "waiting_input"      // it asks a question (not a permission)
	AgentDone              = "done"               // it finished its work and ended on its own
	AgentError             = "error"              // it failed (Agent.Evidence says why)
	AgentExited            = "exited"             // its process exited
)

// AgentStates lists every agent state, in the order of a lifetime.
var AgentStates = []string{AgentSpawning, AgentBooting, AgentReady, AgentWorking,
	AgentWaitingPermission, AgentWaitingInput, AgentDone, AgentError, AgentExited}

// ValidAgentState reports whether s is an agent state.
func ValidAgentState(s string) bool { return slices.Contains(AgentStates, s) }

// AgentFinal reports whether an agent in state s will change no more.
func AgentFinal(s string) bool { return s == AgentDone || s == AgentError || s == AgentExited }

// Sources of an agent's state (Agent.StateSource, AgentSignal.Source), the most
// reliable first.
const (
	SourceHook    = "hook"    // the CLI's own hooks (Claude Code's settings, Codex notify)
	SourceStream  = "stream"  // a structured event stream (OpenCode's /event, stream-json)
	SourceScreen  = "screen"  // the driver's screen rules on the session's screen
	SourceProcess = "process" // the process itself (started, exited)
)

// AgentSources lists the sources, the most reliable first.
var AgentSources = []string{SourceHook, SourceStream, SourceScreen, SourceProcess}

// Driver names (Agent.Driver, SpawnRequest.Driver).
const (
	DriverClaude   = "claude"   // Claude Code
	DriverCodex    = "codex"    // OpenAI Codex CLI
	DriverOpenCode = "opencode" // OpenCode
	DriverGemini   = "gemini"   // Gemini CLI
	DriverAider    = "aider"    // Aider
	DriverGeneric  = "generic"  // any TUI described by a rule file (SpawnRequest.Rules)
)

// Drivers lists every driver name.
var Drivers = []string{DriverClaude, DriverCodex, DriverOpenCode, DriverGemini, DriverAider, DriverGeneric}

// Limits of agent trees (DESIGN "Agents": trees). An agent spawned by a person or
// a token (no parent agent) is at depth 1.
const (
	// MaxSpawnDepth bounds how deep a tree of agents grows: a child of a root
	// agent is at depth 2, and may spawn none. A policy may set another
	// (`agents: {max_depth}`), up to MaxSpawnDepthCap.
	MaxSpawnDepth = 2
	// MaxChildren bounds the live children of one agent; a policy may set
	// another (`agents: {max_children}`), up to MaxChildrenCap.
	MaxChildren = 10
	// MaxSpawnDepthCap and MaxChildrenCap bound what a policy may set.
	MaxSpawnDepthCap = 5
	MaxChildrenCap   = 100
	// MaxPromptBytes bounds a prompt (spawn, send).
	MaxPromptBytes = 64 << 10
	// MaxRulesBytes bounds a generic driver's rule file.
	MaxRulesBytes = 64 << 10
	// MaxEvidenceBytes bounds an agent's evidence (a rule's matched line, a hook's
	// event), cut with "…".
	MaxEvidenceBytes = 512
)

// Agent is an agent as the API shows it. Its session is NODE/ID too (attach,
// screen, recordings work on it unchanged).
type Agent struct {
	Node   string `json:"node"`
	ID     string `json:"id"` // its session's id
	Driver string `json:"driver"`
	// State is one of AgentStates; StateSource is the source that set it
	// (AgentSources), StateSince when, and Evidence what it saw: a hook's event
	// name, or a rule's name and the screen line it matched ("rule busy-footer:
	// esc to interrupt").
	State       string    `json:"state"`
	StateSource string    `json:"state_source"`
	StateSince  time.Time `json:"state_since"`
	Evidence    string    `json:"evidence,omitempty"`
	// Parent is the agent that spawned it ("NODE/ID"), or the principal that did
	// ("token:NAME") for a root agent; Depth is 1 for a root agent, its parent's
	// plus one for a child. Children are the addresses of its live children.
	Parent   string   `json:"parent,omitempty"`
	Depth    int      `json:"depth"`
	Children []string `json:"children,omitempty"`
	// Usage is what the CLI reported of tokens and cost (absent when it reports
	// nothing); Caps are the limits it runs under.
	Usage *AgentUsage `json:"usage,omitempty"`
	Caps  *AgentCaps  `json:"caps,omitempty"`
	// Prompt is the first prompt it was given (bounded), Workdir where it runs.
	Prompt  string            `json:"prompt,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Program is the CLI it runs (a path on the node), Rules the version of the
	// driver's screen rules ("claude/1").
	Program   string    `json:"program,omitempty"`
	Rules     string    `json:"rules,omitempty"`
	Owner     string    `json:"owner,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// ExitCode is the process's, once it exited (when known).
	ExitCode *int `json:"exit_code,omitempty"`
}

// Address is the agent's NODE/ID.
func (a Agent) Address() string { return a.Node + "/" + a.ID }

// AgentUsage is what an agent's CLI reported of its consumption.
type AgentUsage struct {
	InputTokens  int64   `json:"input_tokens,omitempty"`
	OutputTokens int64   `json:"output_tokens,omitempty"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
	Turns        int     `json:"turns,omitempty"`
}

// AgentCaps are limits an agent runs under: past one, it is interrupted and
// marked error with the reason (0: none).
type AgentCaps struct {
	MaxCostUSD float64 `json:"max_cost_usd,omitempty"`
	MaxTurns   int     `json:"max_turns,omitempty"`
}

// AgentSignal is one observation of an agent's state from one source: a hook's
// event, a stream's, a screen rule's match, the process's exit. The node
// reconciles them (package agent).
type AgentSignal struct {
	Source   string    `json:"source"`
	State    string    `json:"state"`
	Evidence string    `json:"evidence,omitempty"`
	Time     time.Time `json:"time"`
}

// Agent event types (AgentEvent.Type).
const (
	AgentEventSpawned = "spawned"
	AgentEventState   = "state"
	AgentEventUsage   = "usage"
	AgentEventEnded   = "ended" // its session was closed (killed or reaped)
)

// AgentEvent is published on <prefix>.agent.<node>.<id>.
type AgentEvent struct {
	Type  string    `json:"type"`
	Node  string    `json:"node"`
	Agent string    `json:"agent"`
	Time  time.Time `json:"time"`
	// State, Source, Evidence: of a state change (and of spawned); Previous is
	// the state before it.
	State    string      `json:"state,omitempty"`
	Previous string      `json:"previous,omitempty"`
	Source   string      `json:"source,omitempty"`
	Evidence string      `json:"evidence,omitempty"`
	Usage    *AgentUsage `json:"usage,omitempty"`
}

// SpawnRequest asks for a new agent (POST /v1/agents, MCP spawn_agent, and the
// node's agent_spawn verb). Without Node the controller picks one.
type SpawnRequest struct {
	Node   string `json:"node,omitempty"`
	Driver string `json:"driver"`
	Cwd    string `json:"cwd,omitempty"`
	// Prompt is typed (and submitted) once the agent is first ready.
	Prompt string `json:"prompt,omitempty"`
	// Parent is the agent ("NODE/ID") that spawns this one; empty: the caller's
	// principal is its parent (a root agent).
	Parent string            `json:"parent,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	// Secrets puts node secrets into the agent's environment: ENVVAR → the name
	// of a secret stored on the node (fleetmux secret set NODE NAME). The values
	// never appear in a reply, stream, recording or audit record.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Program is the CLI to run (a path or a name on the node's PATH); empty:
	// the driver's (claude, codex, …).
	Program string `json:"program,omitempty"`
	// Args are extra arguments for the program.
	Args []string `json:"args,omitempty"`
	// Rules is the rule file of the generic driver (required for it, refused for
	// the others).
	Rules   string     `json:"rules,omitempty"`
	Caps    *AgentCaps `json:"caps,omitempty"`
	Sandbox string     `json:"sandbox,omitempty"`
	Cols    int        `json:"cols,omitempty"`
	Rows    int        `json:"rows,omitempty"`
	// Depth is set by the controller (the parent's depth plus one; 1 for a root
	// agent); a client's value is ignored.
	Depth int `json:"depth,omitempty"`
}

// Node requests of the agent verbs.
type (
	// AgentRequest names an agent (verbs agent_get, agent_kill, agent_interrupt).
	AgentRequest struct {
		Agent string `json:"agent"`
	}
	// AgentSendRequest (verb agent_send): a prompt, typed and submitted.
	AgentSendRequest struct {
		Agent string `json:"agent"`
		Text  string `json:"text"`
	}
	// AgentWaitRequest (verb agent_wait): wait until the agent is in one of
	// States (default: ready and the final states), for at most TimeoutMS.
	AgentWaitRequest struct {
		Agent     string   `json:"agent"`
		States    []string `json:"states,omitempty"`
		TimeoutMS int      `json:"timeout_ms,omitempty"`
	}
	// AgentOutputRequest (verb agent_output): what the agent printed since Cursor
	// (an output offset; 0: from the start), at most MaxBytes of text.
	AgentOutputRequest struct {
		Agent    string `json:"agent"`
		Cursor   int64  `json:"cursor,omitempty"`
		MaxBytes int    `json:"max_bytes,omitempty"`
	}
)

// Replies of the agent verbs.
type (
	// AgentList is the reply of agent_list (and GET /v1/agents).
	AgentList struct {
		Agents      []Agent  `json:"agents"`
		Unavailable []string `json:"unavailable,omitempty"`
	}
	// AgentWaitReply: the agent now, and whether it reached one of the states
	// (false when the timeout passed first).
	AgentWaitReply struct {
		Agent Agent `json:"agent"`
		OK    bool  `json:"ok"`
	}
	// AgentOutput is the reply of agent_output: Text is the agent's output since
	// the cursor, rendered as lines (head and tail within the budget, Omitted
	// bytes cut between them), Screen its screen now; Cursor is where the next
	// read goes on from.
	AgentOutput struct {
		Agent   Agent  `json:"agent"`
		Text    string `json:"text"`
		Screen  string `json:"screen"`
		Cursor  int64  `json:"cursor"`
		Omitted int64  `json:"omitted_bytes,omitempty"`
		// Turns are the agent's last turns as its CLI reported them (Claude
		// Code's hooks), oldest first, at most MaxAgentTurns: what it was asked,
		// the tools it used with their results, its answers.
		Turns []AgentTurn `json:"turns,omitempty"`
	}
	// AgentTurn is one entry of an agent's turns. Its texts are the agent's (a
	// program's output: untrusted), redacted as the session's output is.
	AgentTurn struct {
		Seq  int64     `json:"seq"` // 1, 2, … per agent: entries past one already read
		Time time.Time `json:"time"`
		Kind string    `json:"kind"` // AgentTurnPrompt, AgentTurnTool, AgentTurnAnswer
		// Tool and Input, of a tool use: its name and input (Bash: the command).
		Tool  string `json:"tool,omitempty"`
		Input string `json:"input,omitempty"`
		// Text: the prompt, the tool's result, the answer (at most MaxTurnText
		// bytes).
		Text string `json:"text,omitempty"`
	}
)

// Kinds of agent turns, and their bounds.
const (
	AgentTurnPrompt = "prompt"
	AgentTurnTool   = "tool"
	AgentTurnAnswer = "answer"
	MaxAgentTurns   = 64
	MaxTurnText     = 16 << 10
)

// ParseAgentStates reads a comma-separated list of agent states ("ready,done").
func ParseAgentStates(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !ValidAgentState(p) {
			return nil, Errorf(CodeBadRequest, "agent state %q: want one of %s", p, strings.Join(AgentStates, ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// CheckSpawn checks a new agent against the default tree limits (CheckSpawnIn).
func CheckSpawn(depth, children int) error {
	return CheckSpawnIn(depth, children, MaxSpawnDepth, MaxChildren)
}

// CheckSpawnIn checks a new agent against the tree limits maxDepth and
// maxChildren (the policy's): depth is the new agent's (1 for a root agent),
// children how many live children its parent agent has already (0 for a root
// agent). The error is CodeLimit and says which.
func CheckSpawnIn(depth, children, maxDepth, maxChildren int) error {
	if depth > maxDepth {
		return Errorf(CodeLimit, "spawn depth %d is over the limit of %d: an agent at depth %d may not spawn agents", depth, maxDepth, maxDepth)
	}
	if children >= maxChildren {
		return Errorf(CodeLimit, "the parent agent has %d children already (limit %d): end one first", children, maxChildren)
	}
	return nil
}

// AgentSendBody is the body of POST /v1/agents/{node}/{id}/send: a prompt.
type AgentSendBody struct {
	Text string `json:"text"`
}
