package agent

import (
	"fmt"
	"regexp"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Driver is what fleetmux knows of one coding-agent CLI: the program it runs, how
// to read its state off its screen (Rules), how to submit a prompt and how to
// interrupt it.
type Driver struct {
	Name    string // api.Driver*
	Program string // the CLI, found on the node's PATH unless a path
	Args    []string
	Rules   *Rules
	// Interrupt are the keys that interrupt its work (session key names).
	Interrupt []string
	// SubmitDelay is the pause between a prompt's text and its Enter: TUIs read
	// text and a carriage return that arrive together as a paste, and do not
	// submit it.
	SubmitDelay time.Duration
	// Clear are the keys that empty the CLI's composer, typed (then a pause of
	// SubmitDelay) before each prompt sent to it: a CLI may put an interrupted
	// prompt back there, and a prompt typed after it would be glued to it. They
	// must do nothing else, whatever the CLI shows: no interrupt, no exit.
	// Empty: not known for this CLI.
	Clear []string
}

const defaultSubmitDelay = 80 * time.Millisecond

// Lookup returns the driver named name. The generic driver is made from rules (a
// rule file, ParseRules); the others refuse one.
func Lookup(name, rules string) (*Driver, error) {
	if name == api.DriverGeneric {
		if rules == "" {
			return nil, fmt.Errorf("%w: the generic driver needs a rule file", ErrRules)
		}
		f, err := ParseRules(rules)
		if err != nil {
			return nil, err
		}
		return &Driver{Name: name, Program: f.Program, Rules: &f.Rules, Interrupt: f.Interrupt, Clear: f.Clear, SubmitDelay: f.SubmitDelay}, nil
	}
	mk, ok := builtin[name]
	if !ok {
		return nil, fmt.Errorf("%w: unknown driver %q (want one of %v)", ErrUnknownDriver, name, api.Drivers)
	}
	if rules != "" {
		return nil, fmt.Errorf("%w: only the generic driver takes a rule file", ErrRules)
	}
	return mk(), nil
}

// repeat is n copies of keys, in order.
func repeat(n int, keys ...string) []string {
	out := make([]string, 0, n*len(keys))
	for range n {
		out = append(out, keys...)
	}
	return out
}

// claudeClear empties Claude Code's composer of up to 6 lines on either side
// of its cursor: C-u deletes to the line's start (at the start, the line
// break before), C-k to its end (at the end, the line break after), as in
// Emacs; in an empty composer, and over a dialog, they do nothing. More keys in
// one write (past about 32 bytes) it takes for a paste, and inserts them.
var claudeClear = append(repeat(12, "C-u"), repeat(12, "C-k")...)

// rule builds a built-in rule (its patterns must compile: they are ours).
func rule(name, state string, bottom int, patterns ...string) *Rule {
	r := &Rule{Name: name, State: state, Bottom: bottom, Hold: DefaultHold}
	for _, p := range patterns {
		r.Patterns = append(r.Patterns, regexp.MustCompile(p))
	}
	return r
}

// answer builds a built-in first-run answer.
func answer(name string, keys []string, patterns ...string) *Rule {
	r := rule(name, "", 0, patterns...)
	r.Keys = keys
	return r
}

// builtin are the drivers of known CLIs. Each rule set is versioned: a CLI that
// changes its screens gets a new version, never an edited old one.
var builtin = map[string]func() *Driver{
	// Claude Code 2.1: dialog "Do you want to proceed?" with "❯ 1. Yes" …
	// "3. No"; busy "esc to interrupt" in the footer and a spinner line
	// "✻ Wrangling… (3s · ↑ 18 tokens)"; ready: the footer "? for shortcuts",
	// or, with text in the composer (the footer then has no such hint), the
	// composer "❯ text" between two rules. (claude/1 had no busy-spinner and
	// no ready-composer: an interrupted agent whose prompt the CLI put back in
	// the composer matched no rule.)
	api.DriverClaude: func() *Driver {
		return &Driver{Name: api.DriverClaude, Program: "claude", Interrupt: []string{"Esc"}, SubmitDelay: defaultSubmitDelay, Clear: claudeClear,
			Rules: &Rules{Version: "claude/2",
				States: []*Rule{
					rule("permission-dialog", api.AgentWaitingPermission, 0, `Do you want to (proceed|make this edit|create)`, `^\s*(❯\s*)?1\. Yes`),
					rule("busy-interrupt", api.AgentWorking, 6, `(?i)esc to interrupt`),
					rule("busy-spinner", api.AgentWorking, 12, `^\s*[✻✽✶✳✢·*]\s+\S+…\s+\(`),
					rule("ready-shortcuts", api.AgentReady, 4, `\? for shortcuts`),
					// "❯" at the line's start (a dialog's is indented), not
					// followed by a numbered choice (a first-run dialog's).
					rule("ready-composer", api.AgentReady, 20, `^❯\s*($|[^\s\d]|\d+[^.\d])`, `^─{20,}\s*$`),
				},
				Answers: []*Rule{
					answer("trust-folder", []string{"Enter"}, `(?i)do you trust the files in this folder`),
					answer("text-style", []string{"Enter"}, `(?i)choose the text style`),
				},
			}}
	},
	// Codex CLI: approval "Would you like to run the following command?" (or
	// "Allow command?") with "Yes, proceed"; busy "Esc to interrupt"; ready
	// footer "⏎ send" or "? for shortcuts".
	api.DriverCodex: func() *Driver {
		return &Driver{Name: api.DriverCodex, Program: "codex", Interrupt: []string{"Esc"}, SubmitDelay: defaultSubmitDelay,
			Rules: &Rules{Version: "codex/1",
				States: []*Rule{
					rule("approval", api.AgentWaitingPermission, 0, `(?i)(would you like to run the following command|allow command)\?`, `(?i)yes,? (proceed|allow)`),
					rule("busy-interrupt", api.AgentWorking, 6, `(?i)esc to interrupt`),
					rule("ready-footer", api.AgentReady, 4, `⏎ send|\? for shortcuts`),
				},
				Answers: []*Rule{
					answer("trust-dir", []string{"Enter"}, `(?i)allow codex to work in this folder|trust this (folder|directory)`),
				},
			}}
	},
	// OpenCode 1.x: permission "Permission required" with "Allow once"; busy
	// "esc interrupt"; ready footer "ctrl+p commands" / "enter send".
	api.DriverOpenCode: func() *Driver {
		return &Driver{Name: api.DriverOpenCode, Program: "opencode", Interrupt: []string{"Esc"}, SubmitDelay: defaultSubmitDelay,
			Rules: &Rules{Version: "opencode/1",
				States: []*Rule{
					rule("permission", api.AgentWaitingPermission, 0, `(?i)permission required`, `(?i)allow once`),
					rule("busy-interrupt", api.AgentWorking, 6, `(?i)esc (to )?interrupt`),
					rule("ready-footer", api.AgentReady, 6, `(?i)ctrl\+p commands|enter send`),
				},
			}}
	},
	// Gemini CLI: confirmation "Allow execution" / "Apply this change?" with
	// "Yes, allow once"; busy "esc to cancel"; ready "Type your message".
	api.DriverGemini: func() *Driver {
		return &Driver{Name: api.DriverGemini, Program: "gemini", Interrupt: []string{"Esc"}, SubmitDelay: defaultSubmitDelay,
			Rules: &Rules{Version: "gemini/1",
				States: []*Rule{
					rule("confirmation", api.AgentWaitingPermission, 0, `(?i)allow execution|apply this change\?`, `(?i)yes, allow once`),
					rule("busy-cancel", api.AgentWorking, 6, `(?i)esc to cancel`),
					rule("ready-composer", api.AgentReady, 6, `(?i)type your message`),
				},
			}}
	},
	// Aider: questions end in "(Y)es/(N)o"; busy "Waiting for" (the model) or a
	// "Tokens:" report being printed; ready: its prompt "> " (or "ask> ", …) on
	// the last line.
	api.DriverAider: func() *Driver {
		return &Driver{Name: api.DriverAider, Program: "aider", Interrupt: []string{"C-c"}, SubmitDelay: defaultSubmitDelay,
			Rules: &Rules{Version: "aider/1",
				States: []*Rule{
					rule("yes-no", api.AgentWaitingPermission, 2, `\(Y\)es/\(N\)o`),
					rule("busy-waiting", api.AgentWorking, 3, `(?i)waiting for .*(llm|model|response)`),
					rule("ready-prompt", api.AgentReady, 1, `^(\w+ )?(\w+)?> ?$`),
				},
			}}
	},
}
