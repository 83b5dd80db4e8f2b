package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
)

// Claude Code hooks (DESIGN "Agents": hooks first, screen second). The node writes
// a settings file into a per-agent config directory (CLAUDE_CONFIG_DIR: never
// the user's own ~/.claude) whose hooks run `fleetmux agent-hook DIR` for every
// event; that program hands the event (the JSON Claude Code writes on its stdin)
// to the node over the agent's hook channel (hookwire.go) and prints what the
// node answers. Events become states (HookState); a PermissionRequest is decided
// by the node's policy, synchronously, and answered with PermissionAnswer.

// HookEvents are the Claude Code hook events the per-agent settings subscribe to.
var HookEvents = []string{"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse",
	"PermissionRequest", "Notification", "Stop", "SessionEnd"}

// HookEvent is the part of a Claude Code hook's input the node reads.
type HookEvent struct {
	Name      string          `json:"hook_event_name"`
	SessionID string          `json:"session_id"`
	Source    string          `json:"source"` // SessionStart: startup, resume, clear, compact
	Reason    string          `json:"reason"` // SessionEnd: clear, logout, prompt_input_exit, other
	ToolName  string          `json:"tool_name"`
	ToolInput json.RawMessage `json:"tool_input"`
	// NotificationType (Notification): permission_prompt, idle_prompt, …
	NotificationType string `json:"notification_type"`
	Message          string `json:"message"`
	// Prompt (UserPromptSubmit), the tool's response (PostToolUse) and the
	// last answer (Stop): the agent's turns.
	Prompt       string          `json:"prompt"`
	ToolResponse json.RawMessage `json:"tool_response"`
	LastAnswer   string          `json:"last_assistant_message"`
}

// ParseHookEvent parses a hook's input.
func ParseHookEvent(b []byte) (HookEvent, error) {
	var ev HookEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		return ev, fmt.Errorf("agent: hook event: %w", err)
	}
	if ev.Name == "" || len(ev.Name) > 64 || strings.ContainsFunc(ev.Name, func(r rune) bool { return r < 'A' || r > 'z' }) {
		return ev, fmt.Errorf("agent: hook event: bad name %q", ev.Name)
	}
	return ev, nil
}

// HookState is the agent state a hook event says, with the event as evidence
// ("PermissionRequest Bash"); ok is false for an event that says nothing of the
// state (a Notification of another type, a SessionEnd: exited comes from the
// process).
func HookState(ev HookEvent) (state, evidence string, ok bool) {
	evidence = ev.Name
	switch ev.Name {
	case "SessionStart":
		state = api.AgentReady
	case "UserPromptSubmit":
		state = api.AgentWorking
	case "PreToolUse", "PostToolUse":
		state, evidence = api.AgentWorking, ev.Name+" "+ev.ToolName
	case "PermissionRequest":
		state, evidence = api.AgentWaitingPermission, ev.Name+" "+ev.ToolName
	case "Notification":
		switch ev.NotificationType {
		case "permission_prompt":
			state = api.AgentWaitingPermission
		case "idle_prompt":
			state = api.AgentReady
		default:
			return "", "", false
		}
		evidence = ev.Name + " " + ev.NotificationType
	case "Stop":
		state = api.AgentReady
	case "SessionEnd":
		// Says nothing: exited comes from the process alone. A hook event is
		// also what a program the agent runs can send (it may read the
		// channel's token), and a final state is final: a forged end would
		// leave a working agent past its caps and out of its parent's count.
		return "", "", false
	default:
		return "", "", false
	}
	return state, Cut(strings.TrimSpace(evidence), api.MaxEvidenceBytes), true
}

// Cut bounds s to max bytes (a whole rune at the end), marking a cut with "…".
func Cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[:max-len("…")]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// ToolInputText is a tool's input as the policy matches it (policy.Request.Input):
// for Bash its command; for tools on a file its path; for a fetch or search its
// URL or query; otherwise the input's JSON.
func ToolInputText(tool string, input json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(input, &m) == nil {
		for _, k := range []string{"command", "file_path", "notebook_path", "path", "url", "query", "pattern"} {
			if s, ok := m[k].(string); ok {
				return s
			}
		}
	}
	return string(input)
}

// ToolResponseText is a tool's response (PostToolUse's tool_response) as text:
// a string as it is; Bash's {stdout, stderr} joined; anything else as JSON.
func ToolResponseText(resp json.RawMessage) string {
	var str string
	if json.Unmarshal(resp, &str) == nil {
		return str
	}
	var m map[string]any
	if json.Unmarshal(resp, &m) == nil {
		out, _ := m["stdout"].(string)
		errs, _ := m["stderr"].(string)
		if _, bash := m["stdout"]; bash {
			out, errs = strings.TrimRight(out, "\n"), strings.TrimRight(errs, "\n")
			if out != "" && errs != "" {
				return out + "\n" + errs
			}
			return out + errs
		}
	}
	return string(resp)
}

// PermissionAnswer is the output of a PermissionRequest hook that allows or
// denies the tool (message: why, shown to the model on a deny).
func PermissionAnswer(allow bool, message string) []byte {
	d := map[string]any{"behavior": "deny", "message": Cut(message, 1000)}
	if allow {
		d = map[string]any{"behavior": "allow"}
	}
	b, _ := json.Marshal(map[string]any{"hookSpecificOutput": map[string]any{
		"hookEventName": "PermissionRequest", "decision": d}})
	return b
}

// ClaudeConfig is a per-agent Claude Code config directory (CLAUDE_CONFIG_DIR).
type ClaudeConfig struct {
	// Dir is the directory; WriteClaudeConfig creates it (0700).
	Dir string
	// Workdir is where the agent runs: its folder-trust dialog is answered.
	Workdir string
	// Hook is the argv of the hook program (`fleetmux agent-hook DIR`); empty: no
	// hooks.
	Hook []string
	// KeyTail is the last 20 characters of the API key the agent is given in
	// ANTHROPIC_API_KEY, if any: Claude Code asks once whether to use a key it
	// finds in its environment, and keeps the answer by the key's tail.
	KeyTail string
}

// ErrConfig is wrapped by WriteClaudeConfig's errors.
var ErrConfig = errors.New("agent config")

// WriteClaudeConfig writes c's settings.json (the hooks) and .claude.json (first
// run done, theme chosen, the workdir trusted, the key's use confirmed), so that
// the CLI starts straight at its prompt with nobody present.
func WriteClaudeConfig(c ClaudeConfig) error {
	if !filepath.IsAbs(c.Dir) || !filepath.IsAbs(c.Workdir) {
		return fmt.Errorf("%w: directories must be absolute (%q, %q)", ErrConfig, c.Dir, c.Workdir)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	state := map[string]any{
		"hasCompletedOnboarding": true, "theme": "dark", "bypassPermissionsModeAccepted": false,
		"projects": map[string]any{filepath.Clean(c.Workdir): map[string]any{
			"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true, "projectOnboardingSeenCount": 1}},
	}
	if c.KeyTail != "" {
		state["customApiKeyResponses"] = map[string]any{"approved": []string{c.KeyTail}, "rejected": []string{}}
	}
	settings := map[string]any{}
	if len(c.Hook) > 0 {
		cmd := shellQuote(c.Hook)
		hooks := map[string]any{}
		for _, ev := range HookEvents {
			// A PermissionRequest waits for a person: as long as an approval may
			// (policy.MaxApproveWithin is a day; the CLI's bound is in seconds).
			h := map[string]any{"type": "command", "command": cmd, "timeout": 86400}
			entry := map[string]any{"hooks": []any{h}}
			if ev == "PreToolUse" || ev == "PostToolUse" || ev == "PermissionRequest" {
				entry["matcher"] = "*"
			}
			hooks[ev] = []any{entry}
		}
		settings["hooks"] = hooks
	}
	for name, v := range map[string]any{".claude.json": state, "settings.json": settings} {
		b, _ := json.MarshalIndent(v, "", "  ")
		if err := os.WriteFile(filepath.Join(c.Dir, name), append(b, '\n'), 0o600); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	return nil
}

// shellQuote joins argv into one sh command line, each word single-quoted.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
