package session

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// runCode runs cmd and checks its block finished with exit code want (-1: none, with
// a note).
func runCode(t *testing.T, s *Session, cmd string, want int) Result {
	t.Helper()
	r := run(t, s, cmd)
	if got := exitCode(r); got != want {
		t.Fatalf("%q: exit code %d (note %q), want %d; text %q", cmd, got, r.Block.Note, want, r.Text)
	}
	if want < 0 && r.Block.Note == "" {
		t.Fatalf("%q: no exit code and no note saying why", cmd)
	}
	if want >= 0 && r.Block.Note != "" {
		t.Fatalf("%q: exit code %d with a note %q", cmd, want, r.Block.Note)
	}
	if r.Session.Integration != IntegrationOK {
		t.Fatalf("%q: integration %q", cmd, r.Session.Integration)
	}
	return r
}

// interrupt starts cmd, which the shell reads as an incomplete line, checks that the
// session waits for input, and types Ctrl-C: the block ends with the shell's 130.
func interrupt(t *testing.T, s *Session, cmd string) {
	t.Helper()
	ctx := ctxT(t)
	r, err := s.Run(ctx, cmd, RunOptions{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("%q: %v", cmd, err)
	}
	if _, err := s.Wait(ctx, UntilWaitingInput, 0); err != nil {
		t.Fatalf("%q: wait for the continuation prompt: %v", cmd, err)
	}
	if err := s.SendKeys("C-c"); err != nil {
		t.Fatal(err)
	}
	r, err = s.WaitBlock(ctx, r.Block.N, RunOptions{Timeout: 10 * time.Second})
	if err != nil || r.Block.State != BlockDone || exitCode(r) != 130 {
		t.Fatalf("%q + Ctrl-C: state %s exit %d note %q, %v; want done with 130", cmd, r.Block.State, exitCode(r), r.Block.Note, err)
	}
	if _, err := s.Wait(ctx, UntilIdle, 0); err != nil {
		t.Fatal(err)
	}
}

// TestRejectedLines: lines the shell reads and does not run end as blocks with the
// shell's own $?, not as blocks without a code.
func TestRejectedLines(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		parseErr := map[string]int{"bash": 2, "zsh": 1}[shell]
		runCode(t, s, "true", 0)
		r := runCode(t, s, "fi", parseErr)
		if !strings.Contains(r.Text, "fi") || r.Block.Command != "fi" {
			t.Fatalf("fi: text %q command %q", r.Text, r.Block.Command)
		}
		runCode(t, s, "fi", parseErr) // twice: $? did not change, the line still failed
		runCode(t, s, "echo ok", 0)
		interrupt(t, s, "if true; then")
		interrupt(t, s, `echo "abc`)
		runCode(t, s, "(exit 4)", 4)
		// A failed history expansion: bash re-prompts without setting $? (so the
		// code is unknown, and said so), zsh sets 1 (when $? was 0).
		runCode(t, s, "true", 0)
		if shell == "bash" {
			if r := run(t, s, "echo hi!nosuchevent"); r.Block.ExitCode != nil || r.Block.Note != NoteRejected {
				t.Fatalf("failed history expansion: exit %d note %q, want none and %q", exitCode(r), r.Block.Note, NoteRejected)
			}
		} else {
			runCode(t, s, "echo hi!nosuchevent", 1)
		}
		runCode(t, s, "(exit 5)", 5)
		if shell == "zsh" {
			runCode(t, s, "setopt interactive_comments", 0)
		}
		runCode(t, s, "# only a comment", -1)
		if r := runCode(t, s, "echo after", 0); r.Text != "after" {
			t.Fatalf("after the rejected lines: %q", r.Text)
		}
	})
}

// TestHooksReplaced: users and themes that replace the variables the integration hooks
// into do not take the exit codes away: the integration puts itself back.
func TestHooksReplaced(t *testing.T) {
	steps := map[string][]string{
		"bash": {"PROMPT_COMMAND='true'", "PS1='$ '", "PS0=''", "PROMPT_COMMAND='echo pc-says-hi'",
			"PROMPT_COMMAND=(true)", "unset PROMPT_COMMAND", "PS1='$ '; PS0=''; PROMPT_COMMAND='true'",
			"PROMPT_COMMAND=(); PS0=''"},
		"zsh": {"precmd_functions=()", "preexec_functions=()", "PROMPT='%% '", "precmd_functions=(); preexec_functions=(); PROMPT='%% '",
			"unfunction precmd", "unfunction preexec", "precmd() { print -n }"},
	}
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		if shell == "bash" {
			// PROMPT_COMMAND and PS1 replaced at once: nothing marks this command's
			// end (bash's line editor at a prompt looks like `read -e`), but PS0
			// puts the hooks back for the next one, whose C ends this block with
			// no code and a note; the next command has its code.
			r, err := s.Run(ctxT(t), "unset PROMPT_COMMAND; PS1='$ '", RunOptions{Timeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			runCode(t, s, "echo x$((4+5)); (exit 9)", 9)
			if b, _ := s.Block(r.Block.N); b.State != BlockDone || b.ExitCode != nil || b.Note != NoteEndLost {
				t.Fatalf("the block that removed the hooks: %s exit %v note %q; want done, no code, %q", b.State, b.ExitCode, b.Note, NoteEndLost)
			}
			runCode(t, s, "(exit 9)", 9)
		}
		for _, st := range steps[shell] {
			t.Logf("step %q", st)
			r := run(t, s, st)
			if r.Block.ExitCode == nil && r.Block.Note == "" {
				t.Fatalf("%q: no exit code and no note", st)
			}
			for i := range 2 {
				r := runCode(t, s, "echo x$((4+5)); (exit 9)", 9)
				if r.Text != "x9" {
					t.Fatalf("after %q, run %d: text %q, want x9", st, i+1, r.Text)
				}
			}
		}
	})
}

// TestAllHooksRemoved: with every zsh hook of ours gone, the command that removed them
// ends when the prompt is back, with no code and a note, and the session says its
// integration is lost.
func TestAllHooksRemoved(t *testing.T) {
	s := startShell(t, "zsh")
	r := run(t, s, "unfunction precmd preexec; precmd_functions=(); preexec_functions=()")
	if r.Block.ExitCode != nil || r.Block.Note != NoteEndLost {
		t.Fatalf("exit %d note %q, want none and %q", exitCode(r), r.Block.Note, NoteEndLost)
	}
	if in := s.Info(); in.Integration != IntegrationLost {
		t.Fatalf("integration %q, want lost", in.Integration)
	}
}

// TestThemeRewritesPrompt: a theme that rewrites the prompt in its own hook, which it
// moves after ours at every prompt (so our wrapper is gone when the prompt is drawn).
func TestThemeRewritesPrompt(t *testing.T) {
	rc := map[string]string{
		"bash": `__theme() { PS1="\u@\h \W [\$?] \$ "; PROMPT_COMMAND=("${PROMPT_COMMAND[@]/__theme/:}" __theme); echo -n; }
PROMPT_COMMAND=__theme
`,
		"zsh": `autoload -Uz add-zsh-hook
setopt prompt_subst
__theme() { PROMPT='%n@%m %1~ [%?] %# '; RPROMPT='%*'; add-zsh-hook -d precmd __theme; add-zsh-hook precmd __theme; print -n; }
add-zsh-hook precmd __theme
`,
	}
	forEachShell(t, func(t *testing.T, shell string) {
		home := t.TempDir()
		name := map[string]string{"bash": ".bashrc", "zsh": ".zshrc"}[shell]
		if err := os.WriteFile(filepath.Join(home, name), []byte(rc[shell]), 0o600); err != nil {
			t.Fatal(err)
		}
		s := startShell(t, shell, func(c *Config) {
			c.BaseEnv = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
			c.Dir = home
		})
		for i, code := range []int{0, 3, 9, 0, 1} {
			cmd := "echo line-" + itoa(i) + "; (exit " + itoa(code) + ")"
			if r := runCode(t, s, cmd, code); r.Text != "line-"+itoa(i) {
				t.Fatalf("%q: text %q (the theme's prompt must not be in it)", cmd, r.Text)
			}
		}
	})
}

// TestExecShell: `exec bash` / `exec zsh` replaces the session's shell with one that
// has none of our hooks. The session says so, and commands typed into it end with no
// exit code and a note saying why.
func TestExecShell(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		home := t.TempDir()
		os.WriteFile(filepath.Join(home, ".zshrc"), []byte("PROMPT='z%% '\n"), 0o600) // no zsh-newuser-install
		s := startShell(t, shell, func(c *Config) {
			c.BaseEnv = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
			c.Dir = home
		})
		ctx := ctxT(t)
		runCode(t, s, "echo before", 0)
		r, err := s.Run(ctx, "exec "+shell, RunOptions{Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx, UntilWaitingInput, 0); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"echo in-$((6*7))", "(exit 3)"} {
			res := run(t, s, cmd)
			if res.Block.ExitCode != nil || res.Block.Note != NoteLost || !res.Block.Fallback {
				t.Fatalf("%q after exec: exit %v note %q fallback %v; want no code and note %q", cmd, res.Block.ExitCode, res.Block.Note, res.Block.Fallback, NoteLost)
			}
			if cmd == "echo in-$((6*7))" && res.Text != "in-42" {
				t.Fatalf("text after exec: %q", res.Text)
			}
			if res.Session.Integration != IntegrationLost {
				t.Fatalf("session integration after exec: %q, want lost", res.Session.Integration)
			}
		}
		if b, _ := s.Block(r.Block.N); b.State != BlockRunning || b.ExitCode != nil {
			t.Fatalf("the exec block: %+v (it runs as long as the new shell)", b)
		}
	})
}

// TestSuLoginShell: `su - user` starts a login shell of another user, without our
// integration: commands typed into it end when it prompts again, with the code
// unknown and a note saying why; its exit gives the outer block its code.
func TestSuLoginShell(t *testing.T) {
	testutil.NeedRoot(t) // to create the user
	testutil.NeedTool(t, "su")
	testutil.NeedTool(t, "useradd")
	const name = "fmsutest"
	if _, err := user.Lookup(name); err != nil {
		out, err := exec.Command("useradd", "-m", "-s", "/bin/bash", name).CombinedOutput()
		if err != nil {
			t.Skipf("useradd: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("userdel", "-r", name).Run() })
	}
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		ctx := ctxT(t)
		outer, err := s.Run(ctx, "su - "+name, RunOptions{Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx, UntilWaitingInput, 0); err != nil {
			t.Fatal(err)
		}
		r := run(t, s, "whoami; (exit 3)")
		if r.Text != name || r.Block.ExitCode != nil || r.Block.Note != NoteFallback {
			t.Fatalf("in su: text %q exit %v note %q; want %s, no code, note %q", r.Text, r.Block.ExitCode, r.Block.Note, name, NoteFallback)
		}
		if r.Session.Integration != IntegrationOK {
			t.Fatalf("integration in a nested shell: %q (the session's own shell still has it)", r.Session.Integration)
		}
		run(t, s, "exit 5")
		o, err := s.WaitBlock(ctx, outer.Block.N, RunOptions{Timeout: 10 * time.Second})
		if err != nil || exitCode(o) != 5 {
			t.Fatalf("su block after exit 5: exit %d note %q, %v", exitCode(o), o.Block.Note, err)
		}
		runCode(t, s, "(exit 9)", 9)
	})
}

// TestReadlineReadInBlock: `read -e` (bash's line editor inside a command) waits for
// input like the prompt does; the block stays open until the command ends.
func TestReadlineReadInBlock(t *testing.T) {
	s := startShell(t, "bash")
	ctx := ctxT(t)
	r, err := s.Run(ctx, "read -e -p 'name? ' x; echo got-$x", RunOptions{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx, UntilWaitingInput, 0); err != nil {
		t.Fatal(err)
	}
	// Longer than Settle: nothing may decide in the meantime that the block is over.
	deadline := time.Now().Add(3 * DefaultSettle)
	for time.Now().Before(deadline) {
		if b, _ := s.Block(r.Block.N); b.State != BlockRunning {
			t.Fatalf("the read -e block ended while it waited for input: %+v", b)
		}
		waitChange(ctx, s.Noted(), 10*time.Millisecond)
	}
	if err := s.Input([]byte("bob\r")); err != nil {
		t.Fatal(err)
	}
	r, err = s.WaitBlock(ctx, r.Block.N, RunOptions{Timeout: 10 * time.Second})
	if err != nil || exitCode(r) != 0 || !strings.HasSuffix(r.Text, "got-bob") {
		t.Fatalf("after input: %q exit %d, %v", r.Text, exitCode(r), err)
	}
}

// TestBashGuardOnce: bash's guard stands in PROMPT_COMMAND once, so each prompt runs
// it once (PS1's re-arm must not add a second copy next to the first).
func TestBashGuardOnce(t *testing.T) {
	s := startShell(t, "bash")
	for range 3 {
		runCode(t, s, "true", 0)
	}
	res := run(t, s, `declare -p PROMPT_COMMAND`)
	if n := strings.Count(res.Text, "__fm_guard"); n != 1 {
		t.Fatalf("PROMPT_COMMAND holds the guard %d times, want 1: %s", n, res.Text)
	}
}
