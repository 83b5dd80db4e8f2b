package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The attacks of the red-team review (issue 17): an editing command runs the command
// substitutions of a line nobody accepted (bash: shell-expand-line, Esc C-e; zsh:
// Tab, expand-or-complete), and the trap or the accept widgets let them through.

// atPromptAfter types keys (no Enter) and waits until what must appear on the
// screen does.
func atPromptAfter(t *testing.T, s *Session, keys string, want string) {
	t.Helper()
	if _, err := s.Wait(ctxT(t), UntilIdle, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Input([]byte(keys)); err != nil {
		t.Fatal(err)
	}
	// Long lines wrap (and lose the space at the break): compared without blanks.
	flat := func(x string) string { return strings.Join(strings.Fields(x), "") }
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(flat(screenText(t, s)), flat(want)); {
		if time.Now().After(deadline) {
			t.Fatalf("%q is not on the screen after %q:\n%s", want, keys, screenText(t, s))
		}
		waitChange(ctxT(t), s.Noted(), 50*time.Millisecond)
	}
}

// clearLine drops the unaccepted line (Ctrl-U) and runs a line.
func clearLine(t *testing.T, s *Session) {
	t.Helper()
	if err := s.Input([]byte("\x15")); err != nil {
		t.Fatal(err)
	}
	// A completion or binding that just ran commands left the session running
	// until the next sample sees the shell reading again: Run refuses a running
	// session (busy), so wait for the prompt first.
	if _, err := s.Wait(ctxT(t), UntilIdle, 0); err != nil {
		t.Fatal(err)
	}
	runCode(t, s, "true", 0)
}

// TestGuardUnacceptedExpansion: a command substitution in a line not accepted runs
// only when the guard allows it; a denied one does not run, and the shell says why.
func TestGuardUnacceptedExpansion(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		g := newFakeGuard()
		s := startGuarded(t, shell, g)
		dir := t.TempDir()
		expand := "\x1b\x05" // bash: Esc C-e, shell-expand-line
		if shell == "zsh" {
			expand = "\t" // zsh: Tab, expand-or-complete
		}
		for i, line := range []string{
			"$(touch %s/DENY_a)",
			"echo $(touch %s/DENY_b)",
			"echo `touch %s/DENY_c`",
			"echo $(echo ok; touch %s/DENY_d)",
		} {
			line = fmt.Sprintf(line, dir)
			atPromptAfter(t, s, line+expand, "fleetmux: denied")
			clearLine(t, s)
			ents, _ := os.ReadDir(dir)
			if len(ents) != 0 {
				t.Fatalf("line %d %q: an unaccepted, denied command ran: %s exists", i, line, ents[0].Name())
			}
			// The screen is cleared for the next round.
			runCode(t, s, "clear", 0)
		}
		// Allowed: the expansion works as before.
		atPromptAfter(t, s, "echo $(echo ok-$((6*7)))"+expand, "echo ok-42")
		clearLine(t, s)
		asked := strings.Join(g.asked(), "\n")
		if !strings.Contains(asked, "ok-") {
			t.Fatalf("the guard was not asked about the unaccepted command; it saw:\n%s", asked)
		}
		if strings.Contains(asked, "__fm") {
			t.Fatalf("the guard was asked about the integration's own commands:\n%s", asked)
		}
		// Lines still run, and are checked.
		runCode(t, s, "echo after", 0)
		typeLine(t, s, "touch "+dir+"/x # DENY")
		noFile(t, filepath.Join(dir, "x"))
	})
}

// TestGuardUnacceptedBindings: bash's bind -x commands and completion functions run
// while no line is accepted: each command is decided like a line (a denied one does
// not run), the integration's own hooks are never asked about.
func TestGuardUnacceptedBindings(t *testing.T) {
	g := newFakeGuard()
	s := startGuarded(t, "bash", g)
	dir := t.TempDir()
	// The lines that set them up do not say DENY; the commands they bind do.
	runCode(t, s, `w=DE; bind -x "\"\C-x\C-t\": touch `+dir+`/${w}NY_bind; touch `+dir+`/ok_bind"`, 0)
	runCode(t, s, `w=DE; eval "_fmc() { touch `+dir+`/${w}NY_comp; touch `+dir+`/ok_comp; COMPREPLY=(zz); }"; complete -F _fmc fmcmd`, 0)
	atPromptAfter(t, s, "\x18\x14", "fleetmux: denied")
	atPromptAfter(t, s, "fmcmd \t", "zz")
	clearLine(t, s)
	for _, f := range []string{"DENY_bind", "DENY_comp"} {
		noFile(t, filepath.Join(dir, f))
	}
	for _, f := range []string{"ok_bind", "ok_comp"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("an allowed command of a binding did not run: %v", err)
		}
	}
	if asked := strings.Join(g.asked(), "\n"); strings.Contains(asked, "__fm") {
		t.Fatalf("the guard was asked about the integration's own commands:\n%s", asked)
	}
	// The prompt's own commands (PROMPT_COMMAND, PS1's substitutions) are not asked
	// about, after a line and after an empty one: a new element, or a new PS1 with a
	// substitution, is asked about once as a whole (the first prompt after the line
	// that set it), its commands never.
	runCode(t, s, `PROMPT_COMMAND+=('echo pcmark >/dev/null'); PS1='$(echo ps1mark-$((1+1)))'"$PS1"`, 0)
	runCode(t, s, "true", 0)
	atPromptAfter(t, s, "\r", "ps1mark-2")
	runCode(t, s, "true", 0)
	whole := 0
	for _, a := range g.asked() {
		if a == "echo ps1mark-$((1+1))" || a == "echo pcmark >/dev/null" && whole > 0 {
			t.Fatalf("the guard was asked about the prompt's own command %q", a)
		}
		if a == "echo pcmark >/dev/null" || strings.HasPrefix(a, "$(echo ps1mark-$((1+1)))") {
			whole++
		}
	}
	if whole != 2 {
		t.Fatalf("the new element and PS1 were asked about %d times, want once each:\n%s", whole, strings.Join(g.asked(), "\n"))
	}
}

// TestGuardUnacceptedForgery: bash's shell-expand-line performs the unaccepted line's
// assignments without running a command ($((v=…)), ${v:=…}); the state the trap
// trusts cannot be forged that way into letting a later line or command through.
func TestGuardUnacceptedForgery(t *testing.T) {
	g := newFakeGuard()
	s := startGuarded(t, "bash", g)
	dir := t.TempDir()
	for i, forge := range []string{
		// The next line's command number as the line already decided.
		"x $((__fm_gkey=${__fm_hash@P}+1))",
		// A user's DEBUG trap to run after every allowed command.
		"x ${__fm_udbg:=touch " + dir + "/DENY_u} ${__fm_udbg=touch " + dir + "/DENY_u}",
		// The prompt's own phase, and a line left out of the history.
		"x ${HISTIGNORE:=*DENY*} ${HISTCONTROL:=ignorespace} $((__fm_acc=1))",
	} {
		atPromptAfter(t, s, forge+"\x1b\x05", "x ")
		if err := s.Input([]byte("\x15")); err != nil {
			t.Fatal(err)
		}
		b := typeLine(t, s, " touch "+dir+"/DENY_l")
		if b.ExitCode != nil {
			t.Fatalf("forgery %d: a denied line ran (exit %d)", i, *b.ExitCode)
		}
		runCode(t, s, "true", 0)
		ents, _ := os.ReadDir(dir)
		if len(ents) != 0 {
			t.Fatalf("forgery %d %q: %s exists", i, forge, ents[0].Name())
		}
	}
}

// TestGuardUnacceptedCompsys: zsh's completion system with the _expand completer
// (compinit redefines the completion widgets after ours) expands a denied command
// substitution only when the guard allows it.
func TestGuardUnacceptedCompsys(t *testing.T) {
	g := newFakeGuard()
	s := startGuarded(t, "zsh", g)
	dir := t.TempDir()
	runCode(t, s, `autoload -Uz compinit && compinit -u -D && zstyle ':completion:*' completer _expand _complete`, 0)
	atPromptAfter(t, s, "echo $(touch "+dir+"/DENY_x)\t", "fleetmux: denied")
	clearLine(t, s)
	noFile(t, filepath.Join(dir, "DENY_x"))
	atPromptAfter(t, s, "echo $(echo ok-$((6*7)))\t", "echo ok-42")
	clearLine(t, s)
}

// TestGuardUnacceptedPrompt: bash's shell-expand-line performs the unaccepted line's
// assignments without running a command, so it can plant a PROMPT_COMMAND element
// (${PROMPT_COMMAND[9]:=…}, or element 0 through arithmetic, so that our prompt hook
// is gone): the prompt's own commands are not asked about, but a planted one runs only
// when the guard allows it, after an accepted line and after an empty one. An element
// an accepted line adds is asked about once, at the first prompt it runs at.
func TestGuardUnacceptedPrompt(t *testing.T) {
	g := newFakeGuard()
	s := startGuarded(t, "bash", g)
	dir := t.TempDir()
	for i, plant := range []struct{ keys, then string }{
		{"${PROMPT_COMMAND[9]:=touch " + dir + "/DENY_a}", "true"},
		{"${PROMPT_COMMAND[9]:=touch " + dir + "/DENY_b}", ""},
		{"$((PROMPT_COMMAND=7))${PROMPT_COMMAND[8]:=touch " + dir + "/DENY_c}", "true"},
		{"$((PROMPT_COMMAND=7))${PROMPT_COMMAND[8]:=touch " + dir + "/DENY_d}", ""},
		{"${PROMPT_COMMAND[3]:=\\$(touch " + dir + "/DENY_e)}", "true"},
	} {
		atPromptAfter(t, s, plant.keys+"\x1b\x05", "touch")
		if err := s.Input([]byte("\x15")); err != nil {
			t.Fatal(err)
		}
		if plant.then == "" {
			atPromptAfter(t, s, "\r", "")
		} else {
			typeLine(t, s, plant.then)
		}
		for range 2 {
			if b := typeLine(t, s, "true"); b.ExitCode == nil || *b.ExitCode != 0 {
				t.Fatalf("plant %d: true: %+v; screen:\n%s", i, b, screenText(t, s))
			}
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 0 {
			t.Fatalf("plant %d %q: a planted prompt command ran unchecked: %s exists", i, plant.keys, ents[0].Name())
		}
		runCode(t, s, "clear", 0)
	}
	// An element an accepted line adds runs, is asked about once, and the prompt works.
	runCode(t, s, `PROMPT_COMMAND+=('touch `+dir+`/ok_pc')`, 0)
	runCode(t, s, "true", 0)
	if _, err := os.Stat(filepath.Join(dir, "ok_pc")); err != nil {
		t.Fatalf("an allowed prompt command did not run: %v", err)
	}
	count := func() (n int) {
		for _, a := range g.asked() {
			if strings.Contains(a, "ok_pc") && !strings.Contains(a, "PROMPT_COMMAND+=") {
				n++
			}
		}
		return n
	}
	n := count()
	runCode(t, s, "true", 0)
	runCode(t, s, "true", 0)
	if m := count(); m != n || n > 1 {
		t.Fatalf("the allowed prompt command was asked about %d times, then %d", n, m)
	}
}
