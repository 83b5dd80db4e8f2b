package mcpserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
)

// Result shaping for the MCP tools: every result is a short header line (where,
// exit code, duration, cwd, state) then the text, within a byte budget, with what
// was left out and how to read it said in words a model can act on.

// screenTailLines is how many screen lines a waiting_input result shows.
const screenTailLines = 5

// resultNoBlock is the state of a block result (Block.State) when the session has
// run nothing yet. The other states are api's words: api.BlockDone (the block
// finished), api.BlockRunning (still running: call wait_for),
// api.StateWaitingInput (the command waits for input: send_input) and
// api.StateExited (the session's process has exited).
const resultNoBlock = "no_block"

// addr is NODE/ID.
func addr(node, id string) string { return node + "/" + id }

// jsonArgs renders tool arguments for a hint, e.g. {"node":"n1","session":"s1"}.
func jsonArgs(kv ...any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv[i])
		v, _ := json.Marshal(kv[i+1])
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.String()
}

// fmtDuration is a short duration: 12ms, 1.24s, 2m3s.
func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// blockDuration is how long a block ran (until now while it runs).
func blockDuration(b api.Block, now time.Time) time.Duration {
	if b.StartedAt.IsZero() {
		return 0
	}
	end := now
	if b.FinishedAt != nil {
		end = *b.FinishedAt
	}
	return end.Sub(b.StartedAt)
}

// count is "1 session", "2 sessions".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// labelList is k=v,k=v sorted.
func labelList(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// headTail keeps text within max bytes as head + tail around an omission marker,
// cut at line boundaries where possible, and returns how many bytes it left out.
func headTail(text string, max int) (string, int) {
	if max <= 0 || len(text) <= max {
		return text, 0
	}
	half := max / 2
	h := half
	if i := strings.LastIndexByte(text[:h], '\n'); i > 0 {
		h = i
	}
	for h > 0 && !utf8.RuneStart(text[h]) {
		h--
	}
	t := len(text) - half
	if i := strings.IndexByte(text[t:], '\n'); i >= 0 && t+i+1 < len(text) {
		t += i + 1
	}
	for t < len(text) && !utf8.RuneStart(text[t]) {
		t++
	}
	omitted := t - h
	return text[:h] + "\n[... " + strconv.Itoa(omitted) + " bytes omitted ...]\n" + text[t:], omitted
}

// screenTail is the last n non-empty lines of a screen up to its cursor row (the
// prompt a program shows is there).
func screenTail(sc api.Screen, n int) string {
	rows := strings.Split(sc.Text, "\n")
	if sc.Cursor.Row >= 0 && sc.Cursor.Row < len(rows) {
		rows = rows[:sc.Cursor.Row+1]
	}
	for len(rows) > 0 && strings.TrimSpace(rows[len(rows)-1]) == "" {
		rows = rows[:len(rows)-1]
	}
	if len(rows) > n {
		rows = rows[len(rows)-n:]
	}
	for i, r := range rows {
		rows[i] = strings.TrimRight(r, " ")
	}
	return strings.Join(rows, "\n")
}

// Block is the structured content of run_command, wait_for and read_block.
type Block struct {
	Node    string `json:"node"`
	Session string `json:"session"`
	// State is what happened: done, running, waiting_input, exited, no_block,
	// held, denied or not_run (the result's text says what to do next).
	State string `json:"state" jsonschema:"done, running, waiting_input, exited, no_block, held, denied or not_run"`
	N     int    `json:"n,omitempty"`
	// Command is the block's command.
	Command      string `json:"command,omitempty"`
	ExitCode     *int   `json:"exit_code,omitempty" jsonschema:"absent while running or unknown"`
	ExitCodeNote string `json:"exit_code_note,omitempty" jsonschema:"why a finished command has no exit code: not a success"`
	DurationMS   int64  `json:"duration_ms,omitempty"`
	Cwd          string `json:"cwd,omitempty"`
	SessionState string `json:"session_state,omitempty"`
	OmittedBytes int64  `json:"omitted_bytes,omitempty"`
	LostBytes    int64  `json:"lost_bytes,omitempty"`
	// OK is wait_for's answer: whether the condition held before the timeout.
	OK *bool `json:"ok,omitempty"`
	// Approval, Rule and ApprovalState describe a command the policy held.
	Approval      string `json:"approval,omitempty"`
	Rule          string `json:"rule,omitempty"`
	ApprovalState string `json:"approval_state,omitempty"`
	// FullScreen names the full-screen program in front (vim, top, less).
	FullScreen string `json:"full_screen,omitempty" jsonschema:"the full-screen program in front: drive it with send_keys"`
}

// blockView is what a block result is made from.
type blockView struct {
	node, id string
	br       api.BlockResult // block (N 0: none), text, session
	hasBlock bool
	screen   *api.Screen // shown (its last lines) when the session waits for input
	budget   int         // the budget the text was read with (for the hint)
	query    string      // read_block: how the text was selected (grep, lines)
	now      time.Time
}

// state is what the result says happened.
func (v blockView) state() string {
	s := v.br.Session.State
	switch {
	case !v.hasBlock && s == api.StateExited:
		return api.StateExited
	case !v.hasBlock:
		return resultNoBlock
	case v.br.Block.State == api.BlockDone:
		return api.BlockDone
	case s == api.StateExited:
		return api.StateExited
	case s == api.StateWaitingInput || v.br.Session.WaitingInput:
		return api.StateWaitingInput
	}
	return api.BlockRunning
}

// out is the structured content.
func (v blockView) out() Block {
	b := v.br.Block
	o := Block{Node: v.node, Session: v.id, State: v.state(), SessionState: v.br.Session.State}
	if v.hasBlock {
		o.N, o.Command, o.ExitCode, o.Cwd = b.N, b.Command, b.ExitCode, b.Cwd
		if b.State == api.BlockDone && b.ExitCode == nil {
			o.ExitCodeNote = noteOr(b.ExitCodeNote)
		}
		o.DurationMS = blockDuration(b, v.now).Milliseconds()
		o.OmittedBytes, o.LostBytes = v.br.OmittedBytes, v.br.LostBytes
	}
	if v.fullScreen() {
		o.FullScreen = programName(v.screen.Program)
	}
	return o
}

// fullScreen reports whether the result is of a full-screen program in front.
func (v blockView) fullScreen() bool {
	st := v.state()
	return v.screen != nil && v.screen.FullScreen && (st == api.BlockRunning || st == api.StateWaitingInput)
}

// header is the first line: [NODE/ID #N] exit 2 · 1.24s · cwd /srv · idle · $ make test
func (v blockView) header() string {
	b := v.br.Block
	var parts []string
	if !v.hasBlock {
		parts = append(parts, "no commands yet")
		if v.br.Session.Cwd != "" {
			parts = append(parts, "cwd "+v.br.Session.Cwd)
		}
		parts = append(parts, "session "+orNone(v.br.Session.State))
		return "[" + addr(v.node, v.id) + "] " + strings.Join(parts, " · ")
	}
	d := fmtDuration(blockDuration(b, v.now))
	switch st := v.state(); {
	case st == api.BlockDone && b.ExitCode != nil:
		parts = append(parts, fmt.Sprintf("exit %d", *b.ExitCode), d)
	case st == api.BlockDone:
		parts = append(parts, "done, exit code unknown ("+noteOr(b.ExitCodeNote)+")", d)
	case st == api.StateWaitingInput:
		parts = append(parts, "waiting for input after "+d)
	case st == api.StateExited && b.State != api.BlockDone:
		parts = append(parts, "the session exited while it ran", d)
	default:
		parts = append(parts, "running for "+d)
	}
	if b.Cwd != "" {
		parts = append(parts, "cwd "+api.OneLine(b.Cwd, 200))
	}
	parts = append(parts, "session "+orNone(v.br.Session.State))
	return fmt.Sprintf("[%s #%d] %s · $ %s", addr(v.node, v.id), b.N, strings.Join(parts, " · "), api.OneLine(b.Command, 120))
}

// noteOr is a block's note on its missing exit code, or says there is none.
func noteOr(note string) string {
	if note == "" {
		return "no reason given"
	}
	return note
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// text is the whole result text.
func (v blockView) text() string {
	var sb strings.Builder
	sb.WriteString(v.header())
	sb.WriteByte('\n')
	if v.query != "" {
		sb.WriteString(v.query)
		sb.WriteByte('\n')
	}
	switch {
	case v.hasBlock && v.fullScreen():
		// Its screen follows: the output is what it drew, again.
	case v.hasBlock && v.br.Text == "":
		sb.WriteString("(no output)\n")
	case v.hasBlock:
		sb.WriteString(fence("output", v.br.Text))
		sb.WriteByte('\n')
	}
	args := []any{"node", v.node, "session", v.id}
	if v.br.OmittedBytes > 0 {
		// The omitted lines start after the head: point read_block at them.
		offset := 0
		if i := strings.Index(v.br.Text, "\n[... "); i >= 0 && v.query == "" {
			offset = strings.Count(v.br.Text[:i], "\n") + 1
		}
		fmt.Fprintf(&sb, "[%d bytes of output omitted from the middle (budget %d bytes): call read_block %s to page through them (offset and limit are lines), or with grep to search them]\n",
			v.br.OmittedBytes, v.budget, jsonArgs(append(args, "n", v.br.Block.N, "offset", offset, "limit", 200)...))
	}
	if v.br.LostBytes > 0 {
		fmt.Fprintf(&sb, "[%d bytes of this block's output are no longer held by the node]\n", v.br.LostBytes)
	}
	switch st := v.state(); {
	case v.fullScreen():
		fmt.Fprintf(&sb, "%s is running full-screen: it reads keys, not command lines (run_command is refused while it is in front).\n", programName(v.screen.Program))
		if t := screenBody(*v.screen, v.budget); t != "" {
			sb.WriteString("screen:\n" + fence("screen", t) + "\n")
		}
		fmt.Fprintf(&sb, "%s, then read_screen %s to see it.\n", keysHint(v.screen.Program, v.node, v.id), jsonArgs(args...))
	case st == api.BlockRunning:
		fmt.Fprintf(&sb, "The command is still running. Call wait_for %s to wait for it, read_screen to look at it, or send_keys with [\"C-c\"] to interrupt it.\n", jsonArgs(args...))
	case st == api.StateWaitingInput:
		if v.screen != nil {
			if t := screenTail(*v.screen, screenTailLines); t != "" {
				sb.WriteString("screen (last lines):\n")
				sb.WriteString(fence("screen", t))
				sb.WriteByte('\n')
			}
		}
		fmt.Fprintf(&sb, "The command is waiting for input. Answer with send_input %s (then wait_for), or interrupt it with send_keys [\"C-c\"].\n",
			jsonArgs(append(args, "text", "...", "enter", true)...))
	case st == api.StateExited:
		sb.WriteString("The session's process has exited: call create_session for a new one.\n")
	case st == resultNoBlock:
		sb.WriteString("Nothing has run in this session yet: call run_command.\n")
	}
	return strings.TrimRight(sb.String(), "\n")
}

// programName is a program's name for a result: "a full-screen program" when
// the node did not say.
func programName(p string) string {
	if p == "" {
		return "a full-screen program"
	}
	return p
}

// keysHint says how to drive a full-screen program (by its process name) with
// send_keys: what quits it, and a key or two more. Keys, not send_input: such
// a program takes each key as a command.
func keysHint(prog, node, id string) string {
	keys := func(k ...string) string { return "send_keys " + jsonArgs("node", node, "session", id, "keys", k) }
	switch {
	case prog == "vi" || prog == "view" || prog == "nvim" || strings.HasPrefix(prog, "vim"):
		return keys("Esc", ":", "q", "!", "Enter") + " quits " + prog + " without saving (Esc : w q Enter saves first; i inserts text, Esc ends it)"
	case prog == "less" || prog == "more" || prog == "most" || prog == "man":
		return keys("q") + " quits " + prog + " (Space pages down, / searches)"
	case prog == "top" || prog == "htop" || prog == "btop" || prog == "atop":
		return keys("q") + " quits " + prog
	case prog == "nano":
		return keys("C-x") + " exits nano (it asks whether to save)"
	}
	return "drive it with keys, e.g. " + keys("q") + " or [\"Esc\"] or [\"C-c\"]"
}

// screenBody is a screen's rows, trailing blanks trimmed, within budget bytes
// (head and tail).
func screenBody(sc api.Screen, budget int) string {
	rows := strings.Split(sc.Text, "\n")
	for i, r := range rows {
		rows[i] = strings.TrimRight(r, " ")
	}
	for len(rows) > 0 && rows[len(rows)-1] == "" {
		rows = rows[:len(rows)-1]
	}
	body := strings.Join(rows, "\n")
	if budget > 0 {
		body, _ = headTail(body, budget)
	}
	return body
}

// sessionLine is one session of list_sessions: what it is for, what it does, where.
func sessionLine(s api.Session) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s · %s", addr(s.Node, s.ID), orNone(s.State))
	if s.Title != "" {
		fmt.Fprintf(&b, " · %q", api.OneLine(s.Title, 60))
	} else {
		b.WriteString(" · (untitled)")
	}
	if s.Description != "" {
		fmt.Fprintf(&b, " — %s", api.OneLine(s.Description, 160))
	}
	switch {
	case s.State == api.StateExited && s.ExitCode != nil:
		fmt.Fprintf(&b, " · exited with %d", *s.ExitCode)
	case s.CurrentCommand != "":
		fmt.Fprintf(&b, " · running $ %s", api.OneLine(s.CurrentCommand, 80))
	}
	if s.LastExitCode != nil {
		fmt.Fprintf(&b, " · last exit %d", *s.LastExitCode)
	}
	if s.Integration == api.IntegrationLost {
		b.WriteString(" · shell integration lost: exit codes unknown")
	}
	if s.Cwd != "" {
		fmt.Fprintf(&b, " · cwd %s", s.Cwd)
	}
	if len(s.Labels) > 0 {
		fmt.Fprintf(&b, " · labels %s", labelList(s.Labels))
	}
	return b.String()
}

// Screen is the structured content of read_screen.
type Screen struct {
	Node         string `json:"node"`
	Session      string `json:"session"`
	Cols         int    `json:"cols"`
	Rows         int    `json:"rows"`
	CursorRow    int    `json:"cursor_row"`
	CursorCol    int    `json:"cursor_col"`
	AltScreen    bool   `json:"alt_screen" jsonschema:"a full-screen program (vim, less, top) is showing"`
	WaitingInput bool   `json:"waiting_input"`
	Echo         bool   `json:"echo"`
}

// screenView is what a screen result is made from.
type screenView struct {
	node, id string
	sc       api.Screen
	lines    int // show only the last lines (0: all)
	budget   int
}

func (v screenView) out() Screen {
	sc := v.sc
	return Screen{Node: v.node, Session: v.id, Cols: sc.Cols, Rows: sc.Rows, CursorRow: sc.Cursor.Row, CursorCol: sc.Cursor.Col,
		AltScreen: sc.AltScreen, WaitingInput: sc.WaitingInput, Echo: sc.Echo}
}

// text is a header line (size, cursor, modes) then the screen's rows, trailing
// blanks trimmed.
func (v screenView) text() string {
	sc := v.sc
	parts := []string{fmt.Sprintf("screen %dx%d", sc.Cols, sc.Rows), fmt.Sprintf("cursor row %d col %d", sc.Cursor.Row, sc.Cursor.Col)}
	switch {
	case sc.FullScreen && sc.AltScreen:
		parts = append(parts, "alternate screen: "+programName(sc.Program)+" runs full-screen (drive it with send_keys)")
	case sc.FullScreen:
		parts = append(parts, programName(sc.Program)+" runs full-screen (drive it with send_keys)")
	case sc.AltScreen:
		parts = append(parts, "alternate screen (a full-screen program)")
	case sc.Program != "":
		parts = append(parts, sc.Program+" in front")
	}
	if sc.WaitingInput {
		parts = append(parts, "waiting for input")
		if !sc.Echo && !sc.AltScreen {
			parts = append(parts, "echo off (a password prompt?)")
		}
	}
	rows := strings.Split(sc.Text, "\n")
	for i, r := range rows {
		rows[i] = strings.TrimRight(r, " ")
	}
	for len(rows) > 0 && rows[len(rows)-1] == "" {
		rows = rows[:len(rows)-1]
	}
	if v.lines > 0 && len(rows) > v.lines {
		parts = append(parts, fmt.Sprintf("last %d lines", v.lines))
		rows = rows[len(rows)-v.lines:]
	}
	body := strings.Join(rows, "\n")
	if v.budget > 0 {
		body, _ = headTail(body, v.budget)
	}
	if body == "" {
		body = "(blank screen)"
	} else {
		body = fence("screen", body)
	}
	return "[" + addr(v.node, v.id) + "] " + strings.Join(parts, " · ") + "\n" + body
}

// Session is a session in structured content.
type Session struct {
	Node           string            `json:"node"`
	ID             string            `json:"id"`
	Title          string            `json:"title"`
	Description    string            `json:"description"`
	State          string            `json:"state" jsonschema:"starting, idle, running, waiting_input or exited"`
	CurrentCommand string            `json:"current_command,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	LastExitCode   *int              `json:"last_exit_code,omitempty"`
	ExitCode       *int              `json:"exit_code,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Shell          string            `json:"shell,omitempty"`
	Blocks         int               `json:"blocks,omitempty"`
	Integration    string            `json:"integration,omitempty" jsonschema:"ok; lost or none: exit codes unknown"`
}

func sessionOut(s api.Session) Session {
	return Session{Node: s.Node, ID: s.ID, Title: s.Title, Description: s.Description, State: s.State,
		CurrentCommand: s.CurrentCommand, Cwd: s.Cwd, LastExitCode: s.LastExitCode, ExitCode: s.ExitCode,
		Labels: s.Labels, Shell: s.Shell, Blocks: s.Blocks, Integration: s.Integration}
}
