package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

// screens are the screens of each driver the rules must read (as the fake TUI in
// testdata draws them, from the CLIs' current screens), with the state each shows.
var screens = []struct {
	driver, screen, want string
}{
	{api.DriverClaude, "╭───╮\n│ > │\n╰───╯\n  ? for shortcuts", api.AgentReady},
	{api.DriverClaude, "✻ Thinking… (3s · esc to interrupt)\n╭───╮\n│ > │\n╰───╯\n  ? for shortcuts", api.AgentWorking},
	{api.DriverClaude, "Bash command\n  touch /tmp/x\nDo you want to proceed?\n❯ 1. Yes\n  2. Yes, and don't ask again\n  3. No, and tell Claude what to do differently (esc)", api.AgentWaitingPermission},
	{api.DriverClaude, "Welcome to Claude Code", ""},
	{api.DriverCodex, "▌ Ask Codex to do anything\n⏎ send   ⌃J newline   ⌃C quit", api.AgentReady},
	{api.DriverCodex, "• Working (4s • Esc to interrupt)\n⏎ send", api.AgentWorking},
	{api.DriverCodex, "Would you like to run the following command?\n$ touch x\n› 1. Yes, proceed\n  2. No", api.AgentWaitingPermission},
	{api.DriverOpenCode, "> \nenter send   ctrl+p commands", api.AgentReady},
	{api.DriverOpenCode, "⠋ Working   esc interrupt\nenter send   ctrl+p commands", api.AgentWorking},
	{api.DriverOpenCode, "Permission required\nbash: touch x\nAllow once   Allow always   Reject", api.AgentWaitingPermission},
	{api.DriverGemini, ">   Type your message or @path/to/file", api.AgentReady},
	{api.DriverGemini, "⠏ Thinking (esc to cancel, 2s)\n>   Type your message or @path/to/file", api.AgentWorking},
	{api.DriverGemini, "Allow execution of: 'touch'?\n● 1. Yes, allow once\n  2. No", api.AgentWaitingPermission},
	{api.DriverAider, "Aider v0.86\nModel: x\n> ", api.AgentReady},
	{api.DriverAider, "> fix it\nWaiting for LLM response", api.AgentWorking},
	{api.DriverAider, "Add file to the chat? (Y)es/(N)o [Yes]:", api.AgentWaitingPermission},
}

func TestBuiltinRules(t *testing.T) {
	for _, c := range screens {
		d, err := Lookup(c.driver, "")
		if err != nil {
			t.Fatal(err)
		}
		m, ok := d.Rules.Evaluate(strings.Split(c.screen, "\n"))
		got := ""
		if ok {
			got = m.Rule.State
			if !strings.HasPrefix(m.Evidence(), "rule "+m.Rule.Name+": ") {
				t.Errorf("%s: evidence %q", c.driver, m.Evidence())
			}
		}
		if got != c.want {
			t.Errorf("%s: screen %q read as %q, want %q", c.driver, c.screen, got, c.want)
		}
	}
}

// claudeScreens are the bottoms of Claude Code 2.1.197's screens, as fleetmux's
// screen model renders them, with the rule that must read each.
var claudeScreens = func() []struct{ name, screen, rule string } {
	rule := strings.Repeat("─", 120)
	composer := func(text, footer string) string {
		return "● Running it.\n\n" + rule + "\n❯ " + text + "\n" + rule + "\n" + footer
	}
	return []struct{ name, screen, rule string }{
		{"idle", composer("", "  ? for shortcuts · ← for agents                 ● high · /effort"), "ready-shortcuts"},
		{"idle, text in the composer", composer("bash: touch LATER", "                                                   ● high · /effort"), "ready-composer"},
		{"idle, text, Esc once", composer("again text", "                                                  Esc again to clear"), "ready-composer"},
		{"idle, two lines", "x\n" + rule + "\n❯ line one\n  line two\n" + rule + "\n                ctrl+g to edit in Vim", "ready-composer"},
		{"interrupted", "● Bash(touch LATER1)\n  ⎿  Interrupted · What should Claude do instead?\n\n" + rule + "\n❯ \n" + rule + "\n  ? for shortcuts · ← for agents", "ready-shortcuts"},
		{"busy", "✽ Newspapering… (0s · ↓ 4 tokens)\n  ⎿  Tip: Use Plan Mode\n\n" + rule + "\n❯ \n" + rule + "\n  esc to interrupt · ← for agents", "busy-interrupt"},
		{"busy, text typed, no footer", "✽ Newspapering… (3s · ↓ 4 tokens)\n  ⎿  Tip: Use Plan Mode\n\n" + rule + "\n❯ next thing\n" + rule + "\n", "busy-spinner"},
		{"busy, stop hook", "* Doodling… (running stop hook · 1s · ↓ 19 tokens)\n" + rule + "\n❯ \n" + rule + "\n", "busy-spinner"},
		{"done line", "● FAKE-ANSWER: hello\n\n✻ Brewed for 0s\n" + rule + "\n❯ \n" + rule + "\n  ? for shortcuts", "ready-shortcuts"},
		{"dialog", rule + "\n Bash command\n\n   touch LATER1\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. Yes, and always allow\n   3. No\n\n Esc to cancel · Tab to amend", "permission-dialog"},
		{"first-run choice", rule + "\n Accessing workspace:\n\n" + rule + "\n❯ 1. Yes, I trust this folder\n  2. No, exit\n" + rule, ""},
	}
}()

func TestClaudeScreens(t *testing.T) {
	d, err := Lookup(api.DriverClaude, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claudeScreens {
		m, ok := d.Rules.Evaluate(strings.Split(c.screen, "\n"))
		got := ""
		if ok {
			got = m.Rule.Name
		}
		if got != c.rule {
			t.Errorf("%s: read by rule %q, want %q; screen:\n%s", c.name, got, c.rule, c.screen)
		}
	}
}

func TestEveryDriverLooksUp(t *testing.T) {
	for _, name := range api.Drivers {
		if name == api.DriverGeneric {
			if _, err := Lookup(name, ""); !errors.Is(err, ErrRules) {
				t.Errorf("generic without rules: %v", err)
			}
			continue
		}
		d, err := Lookup(name, "")
		if err != nil || d.Program == "" || len(d.Interrupt) == 0 || !strings.HasPrefix(d.Rules.Version, name+"/") {
			t.Errorf("%s: %+v, %v", name, d, err)
		}
		if _, err := Lookup(name, "version 1\nrule r ready -- x"); !errors.Is(err, ErrRules) {
			t.Errorf("%s took a rule file: %v", name, err)
		}
	}
	if _, err := Lookup("vim", ""); !errors.Is(err, ErrUnknownDriver) {
		t.Errorf("unknown driver: %v", err)
	}
}

const sampleRules = `# a TUI
version 1
name mytui/2
program /usr/bin/mytui
interrupt Esc,C-c
clear C-u,C-k
submit-delay 50ms
rule asks waiting_permission -- Allow\?
also -- \[y/n\]
rule busy working hold=3 bottom=2 -- (?i)busy
rule idle ready bottom=1 -- ^> $
answer trust Enter -- Trust this folder
`

func TestParseRules(t *testing.T) {
	f, err := ParseRules(sampleRules)
	if err != nil {
		t.Fatal(err)
	}
	if f.Program != "/usr/bin/mytui" || f.Rules.Version != "mytui/2" || strings.Join(f.Interrupt, " ") != "Esc C-c" || strings.Join(f.Clear, " ") != "C-u C-k" || f.SubmitDelay.Milliseconds() != 50 {
		t.Fatalf("%+v", f)
	}
	if len(f.Rules.States) != 3 || len(f.Rules.States[0].Patterns) != 2 || f.Rules.States[1].Hold != 3 || f.Rules.States[1].Bottom != 2 {
		t.Fatalf("rules %+v", f.Rules.States)
	}
	if len(f.Rules.Answers) != 1 || f.Rules.Answers[0].Keys[0] != "Enter" {
		t.Fatalf("answers %+v", f.Rules.Answers)
	}
	for screen, want := range map[string]string{
		"Allow? [y/n]":        api.AgentWaitingPermission,
		"Allow?":              "",             // the rule needs both patterns
		"BUSY\nmore\n> ":      api.AgentReady, // busy is not in the last 2 lines
		"BUSY\n> ":            api.AgentWorking,
		"hello\n> ":           api.AgentReady,
		"> \nsomething below": "",
	} {
		m, ok := f.Rules.Evaluate(strings.Split(screen, "\n"))
		got := ""
		if ok {
			got = m.Rule.State
		}
		if got != want {
			t.Errorf("%q: %q, want %q", screen, got, want)
		}
	}
	bad := []string{
		"",
		"rule a ready -- x",                       // no version first
		"version 2\nrule a ready -- x",            // unknown version
		"version 1",                               // no rule
		"version 1\nrule a sleeping -- x",         // unknown state
		"version 1\nrule a ready -- (",            // bad regexp
		"version 1\nrule a ready hold=0 -- x",     // bad option
		"version 1\nrule a.b ready -- x",          // bad name
		"version 1\nalso -- x\nrule a ready -- x", // also first
		"version 1\nfrobnicate 3\nrule a ready -- x",
		"version 1\nsubmit-delay 1h\nrule a ready -- x",
		"version 1\nclear " + strings.Repeat("C-u,", 128) + "C-u\nrule a ready -- x",
		"version 1\nrule a ready x",
		"version 1\nname a\x1bb\nrule a ready -- x",
		"version 1\n" + strings.Repeat("rule a ready -- x\n", maxRules+1),
	}
	for _, src := range bad {
		if _, err := ParseRules(src); !errors.Is(err, ErrRules) {
			t.Errorf("%q: %v, want ErrRules", src, err)
		}
	}
}

func FuzzParseRules(f *testing.F) {
	f.Add(sampleRules)
	f.Add("version 1\nrule a ready -- x\nalso -- y")
	f.Add("version 1\nanswer a Enter,Esc hold=1 bottom=1 -- (?i)x")
	f.Fuzz(func(t *testing.T, src string) {
		rf, err := ParseRules(src)
		if err != nil {
			if !errors.Is(err, ErrRules) {
				t.Fatalf("error %v does not wrap ErrRules", err)
			}
			return
		}
		if len(rf.Rules.States) == 0 {
			t.Fatal("a parsed file without rules")
		}
		for _, r := range append(rf.Rules.States, rf.Rules.Answers...) {
			if len(r.Patterns) == 0 || r.Hold < 1 {
				t.Fatalf("rule %+v", r)
			}
		}
		rf.Rules.Evaluate(strings.Split(src, "\n"))
	})
}

func TestText(t *testing.T) {
	raw := "\x1b[?1049h\x1b[2J\x1b[1;1Hhello\x1b[0m world\r\n\x1b[2;1H> \x1b[31mred\x1b[0m\x1b]0;title\x07\r\n\r\n\x07x\ty\x1b[3;1Hhello world\x1b[3;1Hhello world"
	got, omitted := Text([]byte(raw), 0)
	want := "hello world\n> red\nx y\nhello world"
	if got != want || omitted != 0 {
		t.Fatalf("Text = %q (%d), want %q", got, omitted, want)
	}
	if got, _ := Text([]byte("Do\x1b[1Cyou\x1b[Cwant\x1b[3Cto\x1b[0C\x1b[99999Cproceed?"), 0); got != "Do you want   to "+strings.Repeat(" ", 256)+"proceed?" {
		t.Fatalf("cursor forward as spaces: %q", got)
	}
	if got, _ := Text([]byte("\x1b[1mClaude\x1b[19GCode\x1b[24G\x1b[22mv2\x1b[2Gx"), 0); got != "Claude            Code v2 x" {
		t.Fatalf("cursor to a column as spaces: %q", got)
	}
	var long strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&long, "line %d of text\n", i)
	}
	got, omitted = Text([]byte(long.String()), 200)
	if omitted == 0 || len(got) > 260 || !strings.Contains(got, "bytes omitted") {
		t.Fatalf("budget: %d bytes, omitted %d", len(got), omitted)
	}
}
