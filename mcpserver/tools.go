package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/tracing"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
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

// Tool inputs. Descriptions are short: a model reads them on every tools/list.
// The session's node and id are said once here and in the tools' descriptions.
type (
	listNodesIn    struct{}
	listSessionsIn struct {
		Node   string            `json:"node,omitempty" jsonschema:"only this node's sessions"`
		Labels map[string]string `json:"labels,omitempty" jsonschema:"only sessions with all these labels (node labels count)"`
	}
	createSessionIn struct {
		Node        string            `json:"node,omitempty" jsonschema:"where to start it (default: the alive node with the fewest sessions)"`
		Title       string            `json:"title,omitempty" jsonschema:"what it is for, in a few words"`
		Description string            `json:"description,omitempty" jsonschema:"what it is for, at more length"`
		Shell       string            `json:"shell,omitempty" jsonschema:"bash or zsh (default: the node's)"`
		Cwd         string            `json:"cwd,omitempty" jsonschema:"starting directory (default: home)"`
		Labels      map[string]string `json:"labels,omitempty" jsonschema:"labels to find it by"`
	}
	runCommandIn struct {
		Node           string `json:"node" jsonschema:"the session's node"`
		Session        string `json:"session" jsonschema:"the session id, e.g. s3"`
		Command        string `json:"command" jsonschema:"the command line (pipes, && and multi-line scripts are fine)"`
		TimeoutMS      int    `json:"timeout_ms,omitempty" jsonschema:"how long to wait, in ms (default 30000, at most 600000); the command keeps running after it"`
		MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"output budget in bytes (default 8192): head and tail kept"`
		TypeAnyway     bool   `json:"type_anyway,omitempty" jsonschema:"type it into a full-screen program in front too, as keystrokes"`
	}
	waitForIn struct {
		Node           string `json:"node" jsonschema:"the session's node"`
		Session        string `json:"session" jsonschema:"the session id"`
		Until          string `json:"until,omitempty" jsonschema:"idle (default: back at the prompt, or waiting for input), waiting_input, exited, or output (any new output)"`
		TimeoutMS      int    `json:"timeout_ms,omitempty" jsonschema:"in ms (default 30000, at most 600000)"`
		After          int64  `json:"after,omitempty" jsonschema:"until output: the output offset to pass (default: the end now)"`
		MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"output budget in bytes (default 8192)"`
		Approval       string `json:"approval,omitempty" jsonschema:"a held command's approval (NODE/ID): wait for the decision and the command's result"`
	}
	sendInputIn struct {
		Node    string `json:"node" jsonschema:"the session's node"`
		Session string `json:"session" jsonschema:"the session id"`
		Text    string `json:"text,omitempty" jsonschema:"the text to type, as is"`
		Enter   bool   `json:"enter,omitempty" jsonschema:"press Enter after it"`
	}
	sendKeysIn struct {
		Node    string   `json:"node" jsonschema:"the session's node"`
		Session string   `json:"session" jsonschema:"the session id"`
		Keys    []string `json:"keys" jsonschema:"in order: C-c, C-d, C-z, Enter, Tab, Esc, Space, BSpace, Up, Down, Left, Right, Home, End, PgUp, PgDn, Delete, F1-F12, M-x, or one printable character"`
	}
	readScreenIn struct {
		Node    string `json:"node" jsonschema:"the session's node"`
		Session string `json:"session" jsonschema:"the session id"`
		Lines   int    `json:"lines,omitempty" jsonschema:"only the last this many non-blank lines"`
	}
	readBlockIn struct {
		Node     string `json:"node" jsonschema:"the session's node"`
		Session  string `json:"session" jsonschema:"the session id"`
		N        int    `json:"n,omitempty" jsonschema:"the block number (#N; default: the last)"`
		Offset   int    `json:"offset,omitempty" jsonschema:"skip this many lines (after grep)"`
		Limit    int    `json:"limit,omitempty" jsonschema:"at most this many lines"`
		Grep     string `json:"grep,omitempty" jsonschema:"only lines matching this RE2 regexp, with their line numbers"`
		MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"budget in bytes (default 8192)"`
	}
	setSessionInfoIn struct {
		Node        string            `json:"node" jsonschema:"the session's node"`
		Session     string            `json:"session" jsonschema:"the session id"`
		Title       *string           `json:"title,omitempty" jsonschema:"the new title"`
		Description *string           `json:"description,omitempty" jsonschema:"the new description"`
		Labels      map[string]string `json:"labels,omitempty" jsonschema:"labels to add or change"`
	}
	closeSessionIn struct {
		Node    string `json:"node" jsonschema:"the session's node"`
		Session string `json:"session" jsonschema:"the session id"`
	}
	fanoutRunIn struct {
		Command        string            `json:"command" jsonschema:"the command line to run on every target"`
		All            bool              `json:"all,omitempty" jsonschema:"every alive node"`
		Nodes          []string          `json:"nodes,omitempty" jsonschema:"these nodes"`
		Labels         map[string]string `json:"labels,omitempty" jsonschema:"the nodes with all these labels (with nodes: those of them)"`
		Sessions       []string          `json:"sessions,omitempty" jsonschema:"these sessions, as NODE/SESSION (not with all, nodes or labels)"`
		SessionTitle   string            `json:"session_title,omitempty" jsonschema:"run in each node's session with this title (created if missing, kept); default: a fresh session per node, closed after"`
		Batch          int               `json:"batch,omitempty" jsonschema:"targets running at once (default: all)"`
		StopOnFailure  bool              `json:"stop_on_failure,omitempty" jsonschema:"start no more targets after one fails"`
		TimeoutMS      int               `json:"timeout_ms,omitempty" jsonschema:"per target, in ms (default 30000, at most 600000)"`
		Details        bool              `json:"details,omitempty" jsonschema:"add each target's output"`
		MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"with details: budget per target in bytes (default: 8192 shared, at least 512)"`
	}
)

// Tool outputs besides Block, Screen and Session. Their schemas describe only
// what the field name does not say: the result text explains the rest.
type (
	// Node is a node in list_nodes' structured content.
	Node struct {
		Name     string            `json:"name"`
		Status   string            `json:"status" jsonschema:"alive, suspect, disconnected, dead or left"`
		Sessions int               `json:"sessions"`
		Labels   map[string]string `json:"labels,omitempty"`
		Version  string            `json:"version,omitempty"`
	}
	// Nodes is list_nodes' structured content.
	Nodes struct {
		Nodes []Node `json:"nodes"` // never nil
	}
	// Sessions is list_sessions' structured content.
	Sessions struct {
		Sessions    []Session `json:"sessions"` // never nil
		Unavailable []string  `json:"unavailable,omitempty"`
	}
	// Sent is the structured content of send_input and send_keys.
	Sent struct {
		Node    string `json:"node"`
		Session string `json:"session"`
		Bytes   int    `json:"bytes,omitempty"`
		Keys    int    `json:"keys,omitempty"`
	}
	// FanoutTarget is one target of fanout_run.
	FanoutTarget struct {
		Node         string `json:"node"`
		Session      string `json:"session,omitempty"`
		Result       string `json:"result" jsonschema:"ok, exit_status, exit_unknown, timeout, skipped, held or an error code"`
		ExitCode     *int   `json:"exit_code,omitempty"`
		DurationMS   int64  `json:"duration_ms"`
		Error        string `json:"error,omitempty"`
		OmittedBytes int64  `json:"omitted_bytes,omitempty"`
		Approval     string `json:"approval,omitempty"`
	}
	// Fanout is fanout_run's structured content.
	Fanout struct {
		Command string         `json:"command"`
		OK      int            `json:"ok"`
		Failed  int            `json:"failed"`
		Results []FanoutTarget `json:"results"` // never nil
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

// schemaOf is the JSON schema of T, changed by tweak (enums, minimums), with no
// nullable type arrays: jsonschema.For gives pointers and slices the type
// ["null", X], which strict validators (the MCP inspector's --strict, the
// OpenAPI subset some model providers take) refuse or misread. Here such a
// field is X: the tools' JSON never holds null (an optional pointer or slice is
// omitempty, a required slice is never nil), and a client's null is refused.
func schemaOf[T any](tweak func(props map[string]*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp schema of %T: %v", *new(T), err))
	}
	noNull(s)
	if tweak != nil {
		tweak(s.Properties)
	}
	return s
}

// outputSchema is the schema of a tool's structured content: schemaOf, without
// additionalProperties false (an input's unknown field is refused; the
// server's own output needs no such bound, and it is bytes on every tools/list).
func outputSchema[Out any]() *jsonschema.Schema {
	s := schemaOf[Out](nil)
	var open func(*jsonschema.Schema)
	open = func(s *jsonschema.Schema) {
		if s == nil {
			return
		}
		if s.Type == "object" && s.Properties != nil {
			s.AdditionalProperties = nil
		}
		for _, p := range s.Properties {
			open(p)
		}
		open(s.Items)
		open(s.AdditionalProperties)
	}
	open(s)
	return s
}

// noNull takes "null" out of every type array in s and its subschemas; a type
// array left with one type becomes that type.
func noNull(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) > 0 {
		ts := slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" })
		if len(ts) == 1 {
			s.Type, s.Types = ts[0], nil
		} else {
			s.Types = ts
		}
	}
	for _, p := range s.Properties {
		noNull(p)
	}
	for _, d := range s.Defs {
		noNull(d)
	}
	noNull(s.Items)
	noNull(s.AdditionalProperties)
	for _, l := range [][]*jsonschema.Schema{s.AnyOf, s.OneOf, s.AllOf, s.PrefixItems} {
		for _, c := range l {
			noNull(c)
		}
	}
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
	if t.InputSchema == nil {
		t.InputSchema = schemaOf[In](nil)
	}
	if t.OutputSchema == nil {
		t.OutputSchema = outputSchema[Out]()
	}
	mcp.AddTool(m.srv, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		ctx, done := m.callCtx(ctx, req)
		defer done()
		ctx, span := toolSpan(ctx, t.Name)
		defer span.End()
		var res *mcp.CallToolResult
		var out Out
		err := allowed(ctx, t.Name)
		if err == nil {
			res, out, err = h(ctx, in)
		}
		tracing.Fail(span, err)
		var te *toolError
		if err != nil && !errors.As(err, &te) {
			m.log.Warn("mcp tool failed", "tool", t.Name, "err", err)
			err = m.explain(err, "", "")
		}
		if audit != nil && m.opts.Audit != nil {
			target, detail := audit(in)
			rec := api.AuditRecord{Actor: actorOf(ctx), Principal: callOf(ctx).principal, Action: "mcp " + t.Name, Session: target, Detail: detail, Result: "ok", TraceID: tracing.TraceID(ctx)}
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
		Description: "List the fleet's machines (nodes): name, status, session count, labels.",
		Annotations: annRead("List nodes"),
	}, nil, m.listNodes)

	addTool(m, &mcp.Tool{
		Name: "list_sessions",
		Description: "List the shell sessions: NODE/SESSION, state, title and description (what it is for), running command or last exit code, cwd. " +
			"Call it first: reuse a fitting session rather than create one.",
		Annotations: annRead("List sessions"),
		InputSchema: schemaOf[listSessionsIn](nil),
	}, nil, m.listSessions)

	addTool(m, &mcp.Tool{
		Name: "create_session",
		Description: "Start a persistent shell session (bash or zsh) and wait for its prompt; give a title and description saying what it is for. " +
			"Returns its node and id for the other tools. It keeps cwd, environment and history until close_session.",
		Annotations: &mcp.ToolAnnotations{Title: "Create a session", DestructiveHint: boolp(false), OpenWorldHint: boolp(false)},
		InputSchema: schemaOf[createSessionIn](nil),
	}, func(in createSessionIn) (string, string) {
		return "", fmt.Sprintf("node %q title %q", in.Node, api.OneLine(in.Title, 80))
	}, m.createSession)

	addTool(m, &mcp.Tool{
		Name: "run_command",
		Description: "Run one command line in a session and wait for it (timeout_ms, default 30 s). Returns a header (NODE/SESSION #N, exit code, duration, cwd, state) and the output " +
			"(head and tail; read_block reads the rest). State running: call wait_for. State waiting_input: the result shows the screen's last lines; answer with send_input. " +
			"Refused (busy) while another command runs, or while a full-screen program (vim, top, less) is in front: drive that with send_keys and read_screen.",
		Annotations: annRun("Run a command"),
		InputSchema: schemaOf[runCommandIn](func(p map[string]*jsonschema.Schema) {
			minimum(p, 0, "timeout_ms", "max_output_bytes")
		}),
	}, sessionAudit(func(in runCommandIn) (string, string, string) {
		return in.Node, in.Session, api.OneLine(in.Command, 200)
	}), m.runCommand)

	addTool(m, &mcp.Tool{
		Name: "wait_for",
		Description: "Wait until a session is idle (the default), waiting_input, exited or has new output, for at most timeout_ms (default 30 s); returns its last block as run_command does (ok false: timed out). " +
			"Use it after run_command said running, or after send_input. After run_command said held, pass approval: it waits for a person's decision and returns the command's result.",
		Annotations: annRead("Wait for a session"),
		InputSchema: schemaOf[waitForIn](func(p map[string]*jsonschema.Schema) {
			p["until"].Enum = []any{api.UntilIdle, api.UntilWaitingInput, api.UntilExited, api.UntilOutput}
			minimum(p, 0, "timeout_ms", "after", "max_output_bytes")
		}),
	}, nil, m.waitFor)

	addTool(m, &mcp.Tool{
		Name: "send_input",
		Description: "Type text into a session, e.g. the answer to a prompt (enter: true presses Enter). It does not wait: call wait_for next. " +
			"For a shell command use run_command; for keys (C-c, Esc) send_keys.",
		Annotations: annRun("Type into a session"),
		InputSchema: schemaOf[sendInputIn](nil),
	}, sessionAudit(func(in sendInputIn) (string, string, string) {
		return in.Node, in.Session, fmt.Sprintf("%d bytes, enter %v", len(in.Text), in.Enter)
	}), m.sendInput)

	addTool(m, &mcp.Tool{
		Name:        "send_keys",
		Description: "Send named keys to a session: C-c interrupts, C-d ends input, q or Esc leaves a pager or editor. It does not wait: call read_screen or wait_for next.",
		Annotations: annRun("Send keys"),
		InputSchema: schemaOf[sendKeysIn](nil),
	}, sessionAudit(func(in sendKeysIn) (string, string, string) {
		return in.Node, in.Session, api.OneLine(strings.Join(in.Keys, " "), 200)
	}), m.sendKeys)

	addTool(m, &mcp.Tool{
		Name: "read_screen",
		Description: "Read a session's screen as text, as a person sees it: for full-screen programs (vim, less, top) and prompts. " +
			"The header says the size, the cursor, whether a full-screen program shows and whether it waits for input.",
		Annotations: annRead("Read the screen"),
		InputSchema: schemaOf[readScreenIn](func(p map[string]*jsonschema.Schema) {
			minimum(p, 0, "lines")
		}),
	}, nil, m.readScreen)

	addTool(m, &mcp.Tool{
		Name:        "read_block",
		Description: "Read one command's (block's) output, by default the last one's: page with offset and limit (lines), or grep. The header gives exit code, duration and cwd.",
		Annotations: annRead("Read a command's output"),
		InputSchema: schemaOf[readBlockIn](func(p map[string]*jsonschema.Schema) {
			minimum(p, 0, "n", "offset", "limit", "max_bytes")
		}),
	}, nil, m.readBlock)

	addTool(m, &mcp.Tool{
		Name:        "set_session_info",
		Description: "Set a session's title, description or labels (only those given), so that list_sessions says what it is for.",
		Annotations: &mcp.ToolAnnotations{Title: "Describe a session", DestructiveHint: boolp(false), IdempotentHint: true, OpenWorldHint: boolp(false)},
		InputSchema: schemaOf[setSessionInfoIn](nil),
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
		Description: "Close a session you created and no longer need (an admin may close any): its shell and what runs in it end; its recording stays.",
		Annotations: &mcp.ToolAnnotations{Title: "Close a session", DestructiveHint: boolp(true), IdempotentHint: true, OpenWorldHint: boolp(false)},
		InputSchema: schemaOf[closeSessionIn](nil),
	}, sessionAudit(func(in closeSessionIn) (string, string, string) { return in.Node, in.Session, "" }), m.closeSession)

	addTool(m, &mcp.Tool{
		Name: "fanout_run",
		Description: "Run one command on many targets at once: all alive nodes, named nodes, nodes with labels, or named sessions. " +
			"Returns a line per target (exit code or error, duration, first output line) and ok/failed counts; details: true adds the outputs.",
		Annotations: annRun("Run on many nodes"),
		InputSchema: schemaOf[fanoutRunIn](func(p map[string]*jsonschema.Schema) {
			minimum(p, 0, "batch", "timeout_ms", "max_output_bytes")
		}),
	}, func(in fanoutRunIn) (string, string) { return "", api.OneLine(in.Command, 200) }, m.fanoutRun)
}

// toolSpan starts the span of one tool call (GenAI conventions: execute_tool, the
// tool's name); the controller's and the nodes' spans of the call hang under it.
// Off, ctx and a no-op span.
func toolSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tracing.Start(ctx, "execute_tool "+name, trace.SpanKindInternal,
		attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.type", "function"), attribute.String("mcp.method.name", "tools/call"),
		attribute.String("fleetmux.principal", callOf(ctx).principal))
}
