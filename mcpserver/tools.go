package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP tools. Each takes typed arguments (their JSON schema comes from the Go
// struct; unknown arguments are refused), returns a text result shaped for a model
// (format.go) and structured content, and reports bad arguments and failures
// as tool errors that say what to call instead.

// Defaults and bounds of the tools' waits.
const (
	defaultTimeoutMS = int(api.DefaultWait / time.Millisecond)
	maxTimeoutMS     = int(api.MaxWait / time.Millisecond)
	// createWaitMS bounds how long create_session waits for the new shell's prompt.
	createWaitMS = 15000
)

// Tool inputs.
type (
	listNodesIn    struct{}
	listSessionsIn struct {
		Node   string            `json:"node,omitempty" jsonschema:"only the sessions of this node"`
		Labels map[string]string `json:"labels,omitempty" jsonschema:"only sessions having all these labels (a session has its node's labels too)"`
	}
	createSessionIn struct {
		Node        string            `json:"node,omitempty" jsonschema:"the node to start it on (see list_nodes); omit to let the controller pick the alive node with the fewest sessions"`
		Title       string            `json:"title,omitempty" jsonschema:"what the session is for, in a few words (e.g. build, db-migration); list_sessions shows it"`
		Description string            `json:"description,omitempty" jsonschema:"what the session is for, at more length, so that you or another agent can pick it up later"`
		Shell       string            `json:"shell,omitempty" jsonschema:"bash or zsh (default: the node's)"`
		Cwd         string            `json:"cwd,omitempty" jsonschema:"the starting directory (default: the home directory)"`
		Labels      map[string]string `json:"labels,omitempty" jsonschema:"labels to find it by (list_sessions, fanout_run)"`
	}
	runCommandIn struct {
		Node           string `json:"node" jsonschema:"the session's node"`
		Session        string `json:"session" jsonschema:"the session id, e.g. s3"`
		Command        string `json:"command" jsonschema:"the shell command line to run (one command line; pipes, && and multi-line scripts are fine)"`
		TimeoutMS      int    `json:"timeout_ms,omitempty" jsonschema:"how long to wait for it to finish, in ms (default 30000, at most 600000); it keeps running after that"`
		MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"the output budget of the result in bytes (default 8192): head and tail are kept, the middle is left out and can be read with read_block"`
	}
	waitForIn struct {
		Node           string `json:"node" jsonschema:"the session's node"`
		Session        string `json:"session" jsonschema:"the session id"`
		Until          string `json:"until,omitempty" jsonschema:"idle (default: the command finished and the shell is back at its prompt; also returns early if the command starts waiting for input), waiting_input, exited, or output (any new output)"`
		TimeoutMS      int    `json:"timeout_ms,omitempty" jsonschema:"how long to wait, in ms (default 30000, at most 600000)"`
		After          int64  `json:"after,omitempty" jsonschema:"with until output: an output offset to pass (default: the session's output end now)"`
		MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"the output budget of the result in bytes (default 8192)"`
		Approval       string `json:"approval,omitempty" jsonschema:"the approval (NODE/ID) run_command or fanout_run said a held command waits for: wait until a person decides and, once approved, until the node ran it (its exit code and output); until is then ignored"`
	}
	sendInputIn struct {
		Node    string `json:"node" jsonschema:"the session's node"`
		Session string `json:"session" jsonschema:"the session id"`
		Text    string `json:"text,omitempty" jsonschema:"the text to type, as is (no Enter unless enter is true)"`
		Enter   bool   `json:"enter,omitempty" jsonschema:"press Enter after the text"`
	}
	sendKeysIn struct {
		Node    string   `json:"node" jsonschema:"the session's node"`
		Session string   `json:"session" jsonschema:"the session id"`
		Keys    []string `json:"keys" jsonschema:"key names sent in order: C-c, C-d, C-z, Enter, Tab, Esc, Space, BSpace, Up, Down, Left, Right, Home, End, PgUp, PgDn, Delete, F1-F12, M-x, or one printable character"`
	}
	readScreenIn struct {
		Node    string `json:"node" jsonschema:"the session's node"`
		Session string `json:"session" jsonschema:"the session id"`
		Lines   int    `json:"lines,omitempty" jsonschema:"show only the last this many non-blank lines (default: the whole screen)"`
	}
	readBlockIn struct {
		Node     string `json:"node" jsonschema:"the session's node"`
		Session  string `json:"session" jsonschema:"the session id"`
		N        int    `json:"n,omitempty" jsonschema:"the block (command) number, as results show it (#N); default: the last block"`
		Offset   int    `json:"offset,omitempty" jsonschema:"skip this many lines of the output (after grep)"`
		Limit    int    `json:"limit,omitempty" jsonschema:"return at most this many lines"`
		Grep     string `json:"grep,omitempty" jsonschema:"keep only lines matching this regular expression (RE2), each prefixed with its line number"`
		MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"the budget of the result in bytes (default 8192)"`
	}
	setSessionInfoIn struct {
		Node        string            `json:"node" jsonschema:"the session's node"`
		Session     string            `json:"session" jsonschema:"the session id"`
		Title       *string           `json:"title,omitempty" jsonschema:"the new title (omit to keep it)"`
		Description *string           `json:"description,omitempty" jsonschema:"the new description (omit to keep it)"`
		Labels      map[string]string `json:"labels,omitempty" jsonschema:"labels to set (merged with the existing ones)"`
	}
	closeSessionIn struct {
		Node    string `json:"node" jsonschema:"the session's node"`
		Session string `json:"session" jsonschema:"the session id"`
	}
	fanoutRunIn struct {
		Command        string            `json:"command" jsonschema:"the shell command line to run on every target"`
		All            bool              `json:"all,omitempty" jsonschema:"run on every alive node"`
		Nodes          []string          `json:"nodes,omitempty" jsonschema:"run on these nodes"`
		Labels         map[string]string `json:"labels,omitempty" jsonschema:"run on the nodes having all these labels (with nodes: those of them that match)"`
		Sessions       []string          `json:"sessions,omitempty" jsonschema:"run in these existing sessions, as NODE/SESSION addresses (excludes all, nodes and labels)"`
		SessionTitle   string            `json:"session_title,omitempty" jsonschema:"on each node, run in the session with this title (created when missing, and kept); default: a fresh session per node, closed afterwards"`
		Batch          int               `json:"batch,omitempty" jsonschema:"how many targets run at once (default: all)"`
		StopOnFailure  bool              `json:"stop_on_failure,omitempty" jsonschema:"once a target fails (an error or a non-zero exit code), start no more targets"`
		TimeoutMS      int               `json:"timeout_ms,omitempty" jsonschema:"per-target timeout in ms (default 30000, at most 600000)"`
		Details        bool              `json:"details,omitempty" jsonschema:"include each target's output (within the budget) after the one-line summaries"`
		MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"with details: the output budget per target in bytes (default: 8192 split between the targets, at least 512)"`
	}
)

// Tool outputs besides Block, Screen and Session.
type (
	// Node is a node in list_nodes' structured content.
	Node struct {
		Name     string            `json:"name" jsonschema:"the node name (pass it as node)"`
		Status   string            `json:"status" jsonschema:"alive, suspect, disconnected, dead or left"`
		Sessions int               `json:"sessions" jsonschema:"how many sessions it has"`
		Labels   map[string]string `json:"labels,omitempty" jsonschema:"the node's labels"`
		Version  string            `json:"version,omitempty" jsonschema:"the node agent's version"`
	}
	// Nodes is list_nodes' structured content.
	Nodes struct {
		Nodes []Node `json:"nodes" jsonschema:"the nodes, by name"`
	}
	// Sessions is list_sessions' structured content.
	Sessions struct {
		Sessions    []Session `json:"sessions" jsonschema:"the sessions, by node and id"`
		Unavailable []string  `json:"unavailable,omitempty" jsonschema:"nodes that did not answer: their sessions are missing"`
	}
	// Sent is the structured content of send_input and send_keys.
	Sent struct {
		Node    string `json:"node" jsonschema:"the session's node"`
		Session string `json:"session" jsonschema:"the session id"`
		Bytes   int    `json:"bytes,omitempty" jsonschema:"send_input: the bytes typed"`
		Keys    int    `json:"keys,omitempty" jsonschema:"send_keys: the keys sent"`
	}
	// FanoutTarget is one target of fanout_run.
	FanoutTarget struct {
		Node         string `json:"node" jsonschema:"the target's node"`
		Session      string `json:"session,omitempty" jsonschema:"the session it ran in"`
		Result       string `json:"result" jsonschema:"ok, exit_status (non-zero exit code), exit_unknown (finished, exit code unknown: error says why), timeout (still running), skipped, or an error code"`
		ExitCode     *int   `json:"exit_code,omitempty" jsonschema:"the command's exit code"`
		DurationMS   int64  `json:"duration_ms" jsonschema:"how long the target took"`
		Error        string `json:"error,omitempty" jsonschema:"what went wrong"`
		OmittedBytes int64  `json:"omitted_bytes,omitempty" jsonschema:"output bytes left out of the text"`
		Approval     string `json:"approval,omitempty" jsonschema:"result held: the approval (NODE/ID) the command waits for (wait_for with it)"`
	}
	// Fanout is fanout_run's structured content.
	Fanout struct {
		Command string         `json:"command" jsonschema:"the command"`
		OK      int            `json:"ok" jsonschema:"targets whose command finished with exit code 0 (an unknown exit code is not ok)"`
		Failed  int            `json:"failed" jsonschema:"targets that failed, timed out or were skipped"`
		Results []FanoutTarget `json:"results" jsonschema:"one per target, in order"`
	}
)

func boolp(b bool) *bool { return &b }

// Tool annotations.
var (
	annRead = func(title string) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{Title: title, ReadOnlyHint: true, OpenWorldHint: boolp(false)}
	}
	// annRun: runs commands or types into programs: anything may happen.
	annRun = func(title string) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{Title: title, DestructiveHint: boolp(true), OpenWorldHint: boolp(true)}
	}
)

// inputSchema is the schema of In, changed by tweak (enums, minimums).
func inputSchema[In any](tweak func(props map[string]*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp input schema: %v", err))
	}
	if tweak != nil {
		tweak(s.Properties)
	}
	return s
}

func minimum(props map[string]*jsonschema.Schema, v float64, names ...string) {
	for _, n := range names {
		props[n].Minimum = &v
	}
}

// auditFn says what a mutating call acts on: the session (NODE/ID or "") and a
// short detail (never typed text: it may be a secret).
type auditFn[In any] func(in In) (target, detail string)

// addTool adds a tool whose handler runs with the call's context (actor,
// cancellation), whose errors become tool errors a model can act on, and whose
// calls are audited when audit is set.
func addTool[In, Out any](m *Server, t *mcp.Tool, audit auditFn[In], h func(context.Context, In) (*mcp.CallToolResult, Out, error)) {
	mcp.AddTool(m.srv, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		ctx, done := m.callCtx(ctx, req)
		defer done()
		var res *mcp.CallToolResult
		var out Out
		err := allowed(ctx, t.Name)
		if err == nil {
			res, out, err = h(ctx, in)
		}
		var te *toolError
		if err != nil && !errors.As(err, &te) {
			m.log.Warn("mcp tool failed", "tool", t.Name, "err", err)
			err = m.explain(err, "", "")
		}
		if audit != nil && m.opts.Audit != nil {
			target, detail := audit(in)
			rec := api.AuditRecord{Actor: actorOf(ctx), Principal: callOf(ctx).principal, Action: "mcp " + t.Name, Session: target, Detail: detail, Result: "ok"}
			if err != nil {
				rec.Result, rec.Error = errCode(err), err.Error()
			}
			m.opts.Audit(ctx, rec)
		}
		var zero Out
		if err != nil {
			return nil, zero, err
		}
		return res, out, nil
	})
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// checkSession validates the node and session arguments.
func checkSession(node, id string) error {
	switch {
	case node == "" && id == "":
		return toolErrf("node and session are required: call list_sessions to see the sessions, or create_session")
	case node == "":
		return toolErrf("node is required: call list_sessions to see which node session %q is on", id)
	case id == "":
		return toolErrf("session is required: call list_sessions to see the sessions of node %q, or create_session", node)
	}
	if err := api.ValidName(node); err != nil {
		return toolErrf("bad node %q: names are 1-63 of A-Z a-z 0-9 _ - (call list_nodes)", node)
	}
	if err := api.ValidName(id); err != nil {
		if n, i, perr := api.ParseAddress(id); perr == nil && n == node {
			return toolErrf("bad session %q: pass the id alone, e.g. %q, with node %q", id, i, n)
		}
		return toolErrf("bad session %q: session ids are like s3 (call list_sessions)", id)
	}
	return nil
}

func checkTimeout(ms int) (int, error) {
	switch {
	case ms < 0:
		return 0, toolErrf("timeout_ms must not be negative")
	case ms == 0:
		return defaultTimeoutMS, nil
	case ms > maxTimeoutMS:
		return 0, toolErrf("timeout_ms %d is over the limit of %d (%g minutes): wait again with wait_for instead", ms, maxTimeoutMS, api.MaxWait.Minutes())
	}
	return ms, nil
}

func sessionAudit[In any](f func(In) (string, string, string)) auditFn[In] {
	return func(in In) (string, string) {
		node, id, detail := f(in)
		return addr(node, id), detail
	}
}

func (m *Server) addTools() {
	// Empty names and commands are left to the handlers: their errors say what to
	// call instead, which a schema's minLength would not.

	addTool(m, &mcp.Tool{
		Name:        "list_nodes",
		Description: "List the machines (nodes) of the fleet: name, status (alive, suspect, disconnected, dead, left), session count, labels. Call it to find where to create sessions or where a fan-out can run.",
		Annotations: annRead("List nodes"),
	}, nil, m.listNodes)

	addTool(m, &mcp.Tool{
		Name: "list_sessions",
		Description: "List the shell sessions fleet-wide (or of one node, or with given labels). Each line shows NODE/SESSION, state (idle, running, waiting_input, exited), title and description " +
			"(what the session is for), the running command or the last exit code, and the cwd. Call it first to reuse a fitting session instead of creating one.",
		Annotations: annRead("List sessions"),
		InputSchema: inputSchema[listSessionsIn](nil),
	}, nil, m.listSessions)

	addTool(m, &mcp.Tool{
		Name: "create_session",
		Description: "Start a new persistent shell session (bash or zsh with shell integration) and wait for its prompt. Give it a title and a description saying what it is for. " +
			"Returns the session (node and id) to pass to run_command and the other tools. The session keeps its cwd, environment and history until close_session.",
		Annotations: &mcp.ToolAnnotations{Title: "Create a session", DestructiveHint: boolp(false), OpenWorldHint: boolp(false)},
		InputSchema: inputSchema[createSessionIn](nil),
	}, func(in createSessionIn) (string, string) {
		return "", fmt.Sprintf("node %q title %q", in.Node, api.OneLine(in.Title, 80))
	}, m.createSession)

	addTool(m, &mcp.Tool{
		Name: "run_command",
		Description: "Run one command line in a session and wait for it (up to timeout_ms, default 30 s). Returns a header line (NODE/SESSION #N, exit code, duration, cwd, session state) then the output " +
			"(head and tail within the budget; read_block reads the rest). If the command is still running, the result says state running: call wait_for. If it waits for input (a prompt, read, a pager), " +
			"the result says waiting_input and shows the last screen lines: answer with send_input. Fails if another command is running in the session.",
		Annotations: annRun("Run a command"),
		InputSchema: inputSchema[runCommandIn](func(p map[string]*jsonschema.Schema) {
			minimum(p, 0, "timeout_ms", "max_output_bytes")
		}),
	}, sessionAudit(func(in runCommandIn) (string, string, string) {
		return in.Node, in.Session, api.OneLine(in.Command, 200)
	}), m.runCommand)

	addTool(m, &mcp.Tool{
		Name: "wait_for",
		Description: "Wait until a session is idle (its command finished; the default), waiting_input, exited, or has new output (until: output), for at most timeout_ms (default 30 s). " +
			"Returns the session's last block like run_command: header (exit code, duration, cwd, state) and output; ok false in the structured content when the timeout passed first. " +
			"Use it after run_command said running, or after send_input. " +
			"After run_command said held, call it with approval: it waits until a person decides and returns the command's result once the node ran it (or that it was denied).",
		Annotations: annRead("Wait for a session"),
		InputSchema: inputSchema[waitForIn](func(p map[string]*jsonschema.Schema) {
			p["until"].Enum = []any{api.UntilIdle, api.UntilWaitingInput, api.UntilExited, api.UntilOutput}
			minimum(p, 0, "timeout_ms", "after", "max_output_bytes")
		}),
	}, nil, m.waitFor)

	addTool(m, &mcp.Tool{
		Name: "send_input",
		Description: "Type text into a session, e.g. the answer to a prompt a command waits for (enter: true presses Enter after it). It does not wait: call wait_for next. " +
			"To run a shell command at the prompt, use run_command instead; for control keys (C-c) use send_keys.",
		Annotations: annRun("Type into a session"),
		InputSchema: inputSchema[sendInputIn](nil),
	}, sessionAudit(func(in sendInputIn) (string, string, string) {
		return in.Node, in.Session, fmt.Sprintf("%d bytes, enter %v", len(in.Text), in.Enter)
	}), m.sendInput)

	addTool(m, &mcp.Tool{
		Name:        "send_keys",
		Description: "Send named keys to a session: C-c to interrupt a command, C-d for end of input, q or Esc to leave a pager or editor, arrows to move. It does not wait: call wait_for or read_screen next.",
		Annotations: annRun("Send keys"),
		InputSchema: inputSchema[sendKeysIn](nil),
	}, sessionAudit(func(in sendKeysIn) (string, string, string) {
		return in.Node, in.Session, api.OneLine(strings.Join(in.Keys, " "), 200)
	}), m.sendKeys)

	addTool(m, &mcp.Tool{
		Name: "read_screen",
		Description: "Read a session's current screen as text: what a person looking at the terminal sees. Use it for full-screen programs (vim, less, top, installers) and to see a prompt; " +
			"the header line says the size, the cursor, whether a full-screen program is showing and whether it waits for input.",
		Annotations: annRead("Read the screen"),
		InputSchema: inputSchema[readScreenIn](func(p map[string]*jsonschema.Schema) {
			minimum(p, 0, "lines")
		}),
	}, nil, m.readScreen)

	addTool(m, &mcp.Tool{
		Name: "read_block",
		Description: "Read the output of one command (block) of a session: by default the last one. Page through long output with offset and limit (lines), or keep only the lines matching grep " +
			"(each prefixed with its line number). The header line gives the exit code, duration and cwd.",
		Annotations: annRead("Read a command's output"),
		InputSchema: inputSchema[readBlockIn](func(p map[string]*jsonschema.Schema) {
			minimum(p, 0, "n", "offset", "limit", "max_bytes")
		}),
	}, nil, m.readBlock)

	addTool(m, &mcp.Tool{
		Name:        "set_session_info",
		Description: "Set a session's title, description or labels, so that list_sessions tells you (and other agents) what the session is for. Only the fields given change.",
		Annotations: &mcp.ToolAnnotations{Title: "Describe a session", DestructiveHint: boolp(false), IdempotentHint: true, OpenWorldHint: boolp(false)},
		InputSchema: inputSchema[setSessionInfoIn](nil),
	}, sessionAudit(func(in setSessionInfoIn) (string, string, string) {
		var d []string
		if in.Title != nil {
			d = append(d, "title "+api.OneLine(*in.Title, 80))
		}
		if in.Description != nil {
			d = append(d, "description")
		}
		if len(in.Labels) > 0 {
			d = append(d, "labels "+labelList(in.Labels))
		}
		return in.Node, in.Session, strings.Join(d, ", ")
	}), m.setSessionInfo)

	addTool(m, &mcp.Tool{
		Name:        "close_session",
		Description: "Close a session: its shell and whatever runs in it are ended. Its output stays readable in the recording. Use it for sessions you no longer need.",
		Annotations: &mcp.ToolAnnotations{Title: "Close a session", DestructiveHint: boolp(true), IdempotentHint: true, OpenWorldHint: boolp(false)},
		InputSchema: inputSchema[closeSessionIn](nil),
	}, sessionAudit(func(in closeSessionIn) (string, string, string) { return in.Node, in.Session, "" }), m.closeSession)

	addTool(m, &mcp.Tool{
		Name: "fanout_run",
		Description: "Run one command on many nodes at once: all alive nodes (all: true), named nodes, nodes with labels, or named sessions. Returns one compact line per target " +
			"(NODE/SESSION, exit code or error, duration, first output line) and the ok/failed counts; details: true adds each target's output. " +
			"batch limits how many run at once; stop_on_failure stops starting targets after a failure.",
		Annotations: annRun("Run on many nodes"),
		InputSchema: inputSchema[fanoutRunIn](func(p map[string]*jsonschema.Schema) {
			minimum(p, 0, "batch", "timeout_ms", "max_output_bytes")
		}),
	}, func(in fanoutRunIn) (string, string) { return "", api.OneLine(in.Command, 200) }, m.fanoutRun)
}
