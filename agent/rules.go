package agent

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
)

// Screen rules: how a driver reads an agent's state off its screen. A rule names
// the state it shows and one or more RE2 patterns that must all match a line of
// the screen (each may match a different line), optionally only among the last
// Bottom non-empty lines. Rules are tried in their order, the first match wins:
// a driver lists dialogs first, then its busy rules, then its ready rules, since a
// busy agent's screen often still shows the ready footer's words. A match is
// believed once the same state was seen on Hold consecutive samples.
//
// An answer is a rule for a first-run dialog (onboarding, folder trust): while
// the agent boots, once it holds, the driver types its keys, so that a spawn
// reaches ready on a fresh machine with nobody present.

// DefaultHold is how many consecutive samples a rule must match by default.
const DefaultHold = 2

// Rule is one screen rule.
type Rule struct {
	Name  string
	State string // an api agent state; "" for an answer
	// Patterns must all match (each some line of the region).
	Patterns []*regexp.Regexp
	// Bottom, when positive, limits the region to the last Bottom non-empty lines.
	Bottom int
	// Hold is how many consecutive samples the rule's state must be seen.
	Hold int
	// Keys, of an answer: the named keys it types (session key names).
	Keys []string
}

// Match is a rule that matched a screen: the rule and the line its first pattern
// matched (the evidence).
type Match struct {
	Rule *Rule
	Line string
}

// Evidence is the match in words: "rule NAME: LINE", bounded.
func (m Match) Evidence() string {
	return bound("rule "+m.Rule.Name+": "+strings.TrimSpace(m.Line), api.MaxEvidenceBytes)
}

// match reports whether r matches lines (the screen's rows, top first).
func (r *Rule) match(lines []string) (string, bool) {
	region := lines
	if r.Bottom > 0 {
		var kept []string
		for i := len(lines) - 1; i >= 0 && len(kept) < r.Bottom; i-- {
			if strings.TrimSpace(lines[i]) != "" {
				kept = append(kept, lines[i])
			}
		}
		region = kept // bottom first; the order does not matter for matching
	}
	first := ""
	for i, p := range r.Patterns {
		found := false
		for _, l := range region {
			if p.MatchString(l) {
				if i == 0 {
					first = l
				}
				found = true
				break
			}
		}
		if !found {
			return "", false
		}
	}
	return first, true
}

// Rules is a driver's rule set (one version of it).
type Rules struct {
	// Version names the set ("claude/1"); it is shown with each agent (api.Agent.Rules).
	Version string
	States  []*Rule // state rules, in the order they are tried
	Answers []*Rule // first-run dialogs and their keys
}

// Evaluate returns the first state rule that matches the screen text (rows joined
// by "\n"), if any.
func (rs *Rules) Evaluate(lines []string) (Match, bool) {
	for _, r := range rs.States {
		if l, ok := r.match(lines); ok {
			return Match{Rule: r, Line: l}, true
		}
	}
	return Match{}, false
}

// answer returns the first answer that matches.
func (rs *Rules) answer(lines []string) (Match, bool) {
	for _, r := range rs.Answers {
		if l, ok := r.match(lines); ok {
			return Match{Rule: r, Line: l}, true
		}
	}
	return Match{}, false
}

// ErrRules is wrapped by every error of a rule file.
var ErrRules = errors.New("agent rules")

// RuleFile is a parsed rule file: the generic driver's whole description of a TUI.
//
// The format is line-based; '#' starts a comment line, blank lines are skipped:
//
//	version 1                       # required, first: the format's version
//	name mytui/3                    # the rule set's version, shown with the agent
//	program mytui                   # the CLI (a name on PATH or a path)
//	interrupt Esc                   # keys that interrupt it (default C-c)
//	clear C-u,C-k                   # keys that empty its composer (default none)
//	submit-delay 100ms              # pause between a prompt's text and its Enter
//	rule NAME STATE [hold=N] [bottom=N] -- REGEX
//	also -- REGEX                   # one more pattern the rule above needs
//	answer NAME KEY[,KEY…] [hold=N] [bottom=N] -- REGEX
//
// STATE is one of ready, working, waiting_permission, waiting_input, done, error.
// At least one rule is required.
type RuleFile struct {
	Rules       Rules
	Program     string
	Interrupt   []string
	Clear       []string
	SubmitDelay time.Duration
}

// screenStates are the states a screen rule may show.
var screenStates = []string{api.AgentReady, api.AgentWorking, api.AgentWaitingPermission, api.AgentWaitingInput, api.AgentDone, api.AgentError}

// maxRules bounds the rules of one file.
const maxRules = 64

// ParseRules parses a rule file (RuleFile). It never panics, whatever the input.
func ParseRules(src string) (*RuleFile, error) {
	if len(src) > api.MaxRulesBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrRules, api.MaxRulesBytes)
	}
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("%w: not UTF-8", ErrRules)
	}
	f := &RuleFile{Rules: Rules{Version: "generic"}, Interrupt: []string{"C-c"}, SubmitDelay: defaultSubmitDelay}
	var last *Rule
	sawVersion := false
	for i, raw := range strings.Split(src, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: line %d: %s", ErrRules, i+1, fmt.Sprintf(format, args...))
		}
		head, pattern, hasPattern := strings.Cut(line, " -- ")
		fields := strings.Fields(head)
		if !sawVersion {
			if len(fields) != 2 || fields[0] != "version" || fields[1] != "1" || hasPattern {
				return nil, bad("want \"version 1\" first")
			}
			sawVersion = true
			continue
		}
		switch kw := fields[0]; kw {
		case "name", "program", "interrupt", "clear", "submit-delay":
			if len(fields) != 2 || hasPattern {
				return nil, bad("%s takes one value", kw)
			}
			v := fields[1]
			switch kw {
			case "name":
				if len(v) > 64 || api.ValidText("name", v, false) != nil {
					return nil, bad("name %q: at most 64 printable bytes", v)
				}
				f.Rules.Version = v
			case "program":
				if len(v) > 4096 || strings.ContainsRune(v, 0) {
					return nil, bad("program too long")
				}
				f.Program = v
			case "interrupt":
				f.Interrupt = strings.Split(v, ",")
			case "clear":
				if f.Clear = strings.Split(v, ","); len(f.Clear) > 128 {
					return nil, bad("more than 128 clear keys")
				}
			case "submit-delay":
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 || d > 5*time.Second {
					return nil, bad("submit-delay %q: want a duration of 0 to 5s", v)
				}
				f.SubmitDelay = d
			}
		case "rule", "answer":
			if !hasPattern || len(fields) < 3 {
				return nil, bad("want %s NAME %s [hold=N] [bottom=N] -- REGEX", kw, map[string]string{"rule": "STATE", "answer": "KEYS"}[kw])
			}
			if len(f.Rules.States)+len(f.Rules.Answers) >= maxRules {
				return nil, bad("more than %d rules", maxRules)
			}
			r := &Rule{Name: fields[1], Hold: DefaultHold}
			if err := api.ValidName(r.Name); err != nil {
				return nil, bad("rule name %q: %v", r.Name, err)
			}
			if kw == "rule" {
				if !contains(screenStates, fields[2]) {
					return nil, bad("state %q: want one of %s", fields[2], strings.Join(screenStates, ", "))
				}
				r.State = fields[2]
			} else {
				r.Keys = strings.Split(fields[2], ",")
				if len(r.Keys) > 16 {
					return nil, bad("more than 16 keys")
				}
			}
			for _, opt := range fields[3:] {
				k, v, ok := strings.Cut(opt, "=")
				n, err := strconv.Atoi(v)
				if !ok || err != nil || n < 1 || n > 100 || (k != "hold" && k != "bottom") {
					return nil, bad("option %q: want hold=N or bottom=N (1 to 100)", opt)
				}
				if k == "hold" {
					r.Hold = n
				} else {
					r.Bottom = n
				}
			}
			re, err := compile(pattern)
			if err != nil {
				return nil, bad("%v", err)
			}
			r.Patterns = []*regexp.Regexp{re}
			if kw == "rule" {
				f.Rules.States = append(f.Rules.States, r)
			} else {
				f.Rules.Answers = append(f.Rules.Answers, r)
			}
			last = r
		case "also":
			if !hasPattern || len(fields) != 1 {
				return nil, bad("want also -- REGEX")
			}
			if last == nil {
				return nil, bad("also before any rule")
			}
			if len(last.Patterns) >= 8 {
				return nil, bad("more than 8 patterns in rule %s", last.Name)
			}
			re, err := compile(pattern)
			if err != nil {
				return nil, bad("%v", err)
			}
			last.Patterns = append(last.Patterns, re)
		default:
			return nil, bad("unknown keyword %q", kw)
		}
	}
	if !sawVersion {
		return nil, fmt.Errorf("%w: empty (want \"version 1\" first)", ErrRules)
	}
	if len(f.Rules.States) == 0 {
		return nil, fmt.Errorf("%w: no rule", ErrRules)
	}
	return f, nil
}

// compile compiles a rule's pattern (RE2, at most 1 KiB).
func compile(p string) (*regexp.Regexp, error) {
	p = strings.TrimSpace(p)
	if p == "" || len(p) > 1024 {
		return nil, errors.New("pattern empty or over 1024 bytes")
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", p, err)
	}
	return re, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// bound cuts s to at most n bytes (on a rune boundary, ending in "…").
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
