package session

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

var shells = []string{"bash", "zsh"}

// startShell starts an integrated shell in a hermetic home (so the tester's rc files do
// not matter) and closes it when the test ends.
func startShell(t *testing.T, shell string, mod ...func(*Config)) *Session {
	t.Helper()
	testutil.NeedTool(t, shell)
	home := t.TempDir()
	cfg := Config{
		ID:         "t1",
		Shell:      shell,
		Dir:        home,
		BaseEnv:    []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"},
		RuntimeDir: t.TempDir(),
		Cols:       100,
		Rows:       30,
	}
	for _, f := range mod {
		f(&cfg)
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", shell, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func forEachShell(t *testing.T, f func(t *testing.T, shell string)) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			t.Parallel()
			f(t, sh)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run runs a command that must finish, and returns its result.
func run(t *testing.T, s *Session, cmd string) Result {
	t.Helper()
	res, err := s.Run(ctxT(t), cmd, RunOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("Run(%q): %v", cmd, err)
	}
	if res.Block.State != BlockDone {
		t.Fatalf("Run(%q): block still %s after 20s; text so far %q", cmd, res.Block.State, res.Text)
	}
	return res
}

func exitCode(r Result) int {
	if r.Block.ExitCode == nil {
		return -1
	}
	return *r.Block.ExitCode
}

func TestBlocksExitCodesAndText(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		cases := []struct {
			cmd  string
			text string
			code int
		}{
			{"echo hi", "hi", 0},
			{"false", "", 1},
			{"(exit 7)", "", 7},
			{"true | false", "", 1},
			{"echo out; ls /nonexistent-fm-dir 2>&1 | head -c 0; false | cat; (exit 4) | true; exit_code_is_last=1; true | (exit 5)", "out", 5},
			{"cat <<'EOF'\nhello\n  world $HOME\nEOF", "hello\n  world $HOME", 0},
			{"for i in 1 2 3; do\n  echo n$i\ndone", "n1\nn2\nn3", 0},
			{"printf abc", "abc", 0},
			{"echo 'héllo wörld ✓ 日本語'", "héllo wörld ✓ 日本語", 0},
			{"for i in 1 2 3 4 5; do printf '\\rprogress %d%%' $((i*20)); done; echo", "progress 100%", 0},
			{"echo before; clear; echo after", "after", 0},
			{"printf 'red \\033[31mRED\\033[0m plain\\n'", "red RED plain", 0},
		}
		for i, c := range cases {
			r := run(t, s, c.cmd)
			if r.Block.N != i+1 {
				t.Errorf("%q: block n = %d, want %d (one block per command)", c.cmd, r.Block.N, i+1)
			}
			if r.Text != c.text {
				t.Errorf("%q: text = %q, want %q", c.cmd, r.Text, c.text)
			}
			if got := exitCode(r); got != c.code {
				t.Errorf("%q: exit code = %d, want %d", c.cmd, got, c.code)
			}
			if r.Block.Command != c.cmd {
				t.Errorf("block command = %q, want %q", r.Block.Command, c.cmd)
			}
			if r.Session.State != StateIdle {
				t.Errorf("%q: session state after = %s", c.cmd, r.Session.State)
			}
		}
		if got := len(s.Blocks()); got != len(cases) {
			t.Errorf("%d blocks, want %d", got, len(cases))
		}
		info := s.Info()
		if info.LastExitCode == nil || *info.LastExitCode != 0 {
			t.Errorf("last exit code = %v, want 0", info.LastExitCode)
		}
	})
}

func TestRawRangeAndBigOutput(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell, func(c *Config) { c.ScrollbackBytes = 16 << 20 })
		// 100,000 lines of 100 characters: 10 MB, 10.1 MB with CRLF from the terminal.
		r := run(t, s, "head -c 10000000 /dev/zero | tr '\\0' x | fold -w 100")
		if exitCode(r) != 0 {
			t.Fatalf("exit %d", exitCode(r))
		}
		line := strings.Repeat("x", 100)
		want := append(bytes.Repeat([]byte(line+"\r\n"), 99999), line...) // fold ends without a newline
		var got []byte
		for off := r.Block.Start; off < r.Block.End; {
			p, err := s.Read(off, int(min(1<<20, r.Block.End-off)))
			if err != nil {
				t.Fatalf("Read(%d): %v", off, err)
			}
			got = append(got, p...)
			off += int64(len(p))
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Fatalf("raw range: %d bytes, want %d; first difference at %d: %q", len(got), len(want), i, got[max(0, i-20):min(len(got), i+40)])
		}
		if r.OmittedBytes <= 0 || len(r.Text) > api.DefaultMaxOutputBytes+200 {
			t.Fatalf("budget: %d bytes of text, %d omitted", len(r.Text), r.OmittedBytes)
		}
		if !strings.HasPrefix(r.Text, line+"\n") || !strings.HasSuffix(r.Text, "\n"+line) || !strings.Contains(r.Text, "bytes omitted") {
			t.Fatalf("budgeted text does not show head, marker and tail: %q ... %q", r.Text[:200], r.Text[len(r.Text)-200:])
		}
		full := int64(len(line)+1)*100000 - 1 // lines joined by "\n"
		if shown := int64(strings.Count(r.Text, "x")) + int64(strings.Count(r.Text, "\n")) - 2; shown+r.OmittedBytes != full {
			// head + tail + omitted covers the full rendered text exactly (minus the
			// two newlines around the marker line).
			t.Errorf("shown %d + omitted %d != full %d", shown, r.OmittedBytes, full)
		}
		// The whole text is reachable without a budget.
		all, err := s.BlockText(r.Block.N, TextOptions{MaxBytes: -1})
		if err != nil || int64(len(all.Text)) != full || all.OmittedBytes != 0 {
			t.Fatalf("unbudgeted text: %d bytes (want %d), omitted %d, err %v", len(all.Text), full, all.OmittedBytes, err)
		}
		g, err := s.BlockText(r.Block.N, TextOptions{Grep: "^x{100}$", Offset: 99998, Limit: 5})
		if err != nil || g.Text != "99999: "+line+"\n100000: "+line {
			t.Fatalf("grep/offset/limit: %q, %v", g.Text, err)
		}
	})
}

func TestInterruptBackgroundCwdEnv(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		ctx := ctxT(t)
		r, err := s.Run(ctx, "sleep 30", RunOptions{Timeout: 300 * time.Millisecond})
		if err != nil || r.Block.State != BlockRunning || r.Block.ExitCode != nil {
			t.Fatalf("sleep: %+v, %v; want a running block", r.Block, err)
		}
		if r.Session.State != StateRunning || r.Session.CurrentCommand != "sleep 30" {
			t.Fatalf("session while sleeping: state %s, command %q", r.Session.State, r.Session.CurrentCommand)
		}
		if _, err := s.Run(ctx, "echo no", RunOptions{}); !errors.Is(err, ErrBusy) {
			t.Fatalf("Run while running: %v, want ErrBusy", err)
		}
		if err := s.SendKeys("C-c"); err != nil {
			t.Fatal(err)
		}
		r, err = s.WaitBlock(ctx, r.Block.N, RunOptions{Timeout: 10 * time.Second})
		if err != nil || exitCode(r) != 130 {
			t.Fatalf("after C-c: exit %d, %v; want 130", exitCode(r), err)
		}

		start := time.Now()
		r = run(t, s, "sleep 20 &")
		if exitCode(r) != 0 || time.Since(start) > 10*time.Second {
			t.Fatalf("background job: exit %d after %v", exitCode(r), time.Since(start))
		}
		if r := run(t, s, "jobs"); !strings.Contains(r.Text, "sleep 20") {
			t.Fatalf("jobs: %q", r.Text)
		}

		dir := t.TempDir()
		run(t, s, "cd "+dir)
		r = run(t, s, "pwd")
		if r.Block.Cwd != dir || r.Text != dir || s.Info().Cwd != dir {
			t.Fatalf("after cd: block cwd %q, pwd %q, session cwd %q; want %q", r.Block.Cwd, r.Text, s.Info().Cwd, dir)
		}
		run(t, s, "export FM_PERSIST=bar42")
		if r := run(t, s, "echo $FM_PERSIST"); r.Text != "bar42" {
			t.Fatalf("exported variable: %q", r.Text)
		}
	})
}

func TestReadWaitsForInput(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		ctx := ctxT(t)
		r, err := s.Run(ctx, "read x; echo got=$x", RunOptions{Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Wait(ctx, UntilWaitingInput, 0)
		if err != nil || info.State != StateWaitingInput || !info.WaitingInput {
			t.Fatalf("wait waiting_input: %+v, %v", info, err)
		}
		scr, err := s.Screen()
		if err != nil || !scr.WaitingInput || !scr.Echo {
			t.Fatalf("screen while reading: waiting %v echo %v, %v", scr.WaitingInput, scr.Echo, err)
		}
		if err := s.Input([]byte("bob\n")); err != nil {
			t.Fatal(err)
		}
		r, err = s.WaitBlock(ctx, r.Block.N, RunOptions{Timeout: 10 * time.Second})
		if err != nil || r.Text != "bob\ngot=bob" || exitCode(r) != 0 {
			t.Fatalf("after input: %q exit %d, %v", r.Text, exitCode(r), err)
		}
		if _, err := s.Wait(ctx, UntilIdle, 0); err != nil {
			t.Fatal(err)
		}
		// A password prompt: echo off, seen from the terminal's flags.
		r, _ = s.Run(ctx, "stty -echo; read -r pw; stty echo; echo len=${#pw}", RunOptions{Timeout: 50 * time.Millisecond})
		testutil.Eventually(t, 10*time.Second, func() bool {
			in := s.Info()
			return in.State == StateWaitingInput && !in.Echo
		}, "waiting for input with echo off")
		if err := s.SendKeys("s", "3", "c", "Enter"); err != nil {
			t.Fatal(err)
		}
		r, err = s.WaitBlock(ctx, r.Block.N, RunOptions{Timeout: 10 * time.Second})
		if err != nil || r.Text != "len=3" {
			t.Fatalf("password: %q, %v", r.Text, err)
		}
	})
}

func TestForgedMarksDoNotEndBlocks(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		nonce := s.integ.nonce
		wrong := strings.Repeat("0", len(nonce))
		cmd := `printf '\033]133;D;0\007'; printf '\033]133;fm=` + wrong + `;D;0\007'; printf '\033]133;fm=` + wrong + `;A\007\033]7;fm=` + wrong + `;file://x/etc\007'; printf '\033]133;fm=` + wrong + `;N;0\007\033]133;N;0\007\033]133;fm=` + wrong + `;R;99\007'; sleep 0.3; echo after-forge; (exit 5)`
		r := run(t, s, cmd)
		if exitCode(r) != 5 || r.Text != "after-forge" {
			t.Fatalf("forged marks: exit %d text %q; want 5 and after-forge", exitCode(r), r.Text)
		}
		raw, _ := s.Read(r.Block.Start, int(r.Block.End-r.Block.Start))
		if !bytes.Contains(raw, []byte("\x1b]133;D;0\x07")) || !bytes.Contains(raw, []byte("fm="+wrong+";D;0")) {
			t.Fatalf("forged sequences must stay in the output as plain bytes: %q", raw)
		}
		if s.Info().Cwd == "/etc" {
			t.Fatal("forged OSC 7 changed the cwd")
		}
		// The nonce is in neither the shell's argv, nor its environment, nor on disk.
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join("/proc", itoa(s.Pid()), f))
			if err != nil || bytes.Contains(b, []byte(nonce)) {
				t.Fatalf("/proc/pid/%s holds the nonce (or unreadable: %v)", f, err)
			}
		}
		if r := run(t, s, "env; cat /proc/$$/environ | tr '\\0' '\\n'"); strings.Contains(r.Text, nonce) {
			t.Fatal("the environment of the shell's children holds the nonce")
		}
		if _, err := os.Stat(s.integ.dir); !os.IsNotExist(err) {
			t.Fatalf("integration dir still there after the first prompt: %v", err)
		}
	})
}

func TestNestedShellFallback(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		ctx := ctxT(t)
		outer, err := s.Run(ctx, "bash --norc --noprofile", RunOptions{Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx, UntilWaitingInput, 0); err != nil {
			t.Fatal(err)
		}
		r := run(t, s, "echo nested-$((6*7))")
		if r.Text != "nested-42" || r.Block.ExitCode != nil || !r.Block.Fallback {
			t.Fatalf("nested: text %q exit %v fallback %v; want nested-42, no exit code", r.Text, r.Block.ExitCode, r.Block.Fallback)
		}
		r = run(t, s, "sleep 0.3; echo slept")
		if r.Text != "slept" {
			t.Fatalf("nested sleep: %q", r.Text)
		}
		run(t, s, "exit")
		o, err := s.WaitBlock(ctx, outer.Block.N, RunOptions{Timeout: 10 * time.Second})
		if err != nil || exitCode(o) != 0 {
			t.Fatalf("outer block after nested exit: %+v, %v", o.Block, err)
		}
		if r := run(t, s, "echo back"); r.Text != "back" || exitCode(r) != 0 {
			t.Fatalf("after nested shell: %q", r.Text)
		}
	})
}

func TestVimAltScreen(t *testing.T) {
	vim := testutil.NeedTool(t, "vim")
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		ctx := ctxT(t)
		file := filepath.Join(t.TempDir(), "notes.txt")
		if err := os.WriteFile(file, []byte("first line\nsecond line\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := s.Run(ctx, vim+" -u NONE -i NONE -N "+file, RunOptions{Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx, UntilWaitingInput, 0); err != nil {
			t.Fatal(err)
		}
		var scr Screen
		testutil.Eventually(t, 10*time.Second, func() bool {
			scr, _ = s.Screen()
			return scr.AltScreen && strings.Contains(scr.Text, "second line")
		}, "vim on the alternate screen")
		if !strings.HasPrefix(scr.Text, "first line\nsecond line\n~") || scr.Cursor.Row != 0 || scr.Cursor.Col != 0 {
			t.Fatalf("vim screen: cursor %+v\n%s", scr.Cursor, scr.Text)
		}
		if err := s.SendKeys("Esc", ":", "q", "!", "Enter"); err != nil {
			t.Fatal(err)
		}
		r, err = s.WaitBlock(ctx, r.Block.N, RunOptions{Timeout: 10 * time.Second})
		if err != nil || exitCode(r) != 0 || strings.Contains(r.Text, "second line") {
			t.Fatalf("after :q!: exit %d text %q, %v (alt screen content must not be in the text)", exitCode(r), r.Text, err)
		}
		if scr, _ := s.Screen(); scr.AltScreen {
			t.Fatal("still on the alternate screen after vim quit")
		}
	})
}

func TestExitEndsSession(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		ctx := ctxT(t)
		run(t, s, "echo one")
		r := run(t, s, "exit 3")
		if exitCode(r) != 3 {
			t.Fatalf("exit 3 block: exit %d", exitCode(r))
		}
		info, err := s.Wait(ctx, UntilExited, 0)
		if err != nil || info.State != StateExited || info.ExitCode == nil || *info.ExitCode != 3 {
			t.Fatalf("after exit 3: %+v, %v", info, err)
		}
		if _, err := s.Run(ctx, "echo", RunOptions{}); !errors.Is(err, ErrExited) {
			t.Fatalf("Run after exit: %v, want ErrExited", err)
		}
		if err := s.Input([]byte("x")); !errors.Is(err, ErrExited) {
			t.Fatalf("Input after exit: %v, want ErrExited", err)
		}
	})
}

// TestNoFalseWaitingInputAfterSubmit runs commands that never read the terminal and
// checks, in the event log, that the session never reported waiting_input while
// they ran. The shell was reading the terminal at its prompt when last sampled, and
// that stale sample made a freshly submitted command look like it waited for input
// until the next sample (which an agent would answer by typing into a busy shell).
func TestNoFalseWaitingInputAfterSubmit(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		run(t, s, "true")
		for i := range 30 {
			_, seq := s.Events(0)
			r := run(t, s, "sleep 0.02")
			evs, _ := s.Events(seq)
			for _, e := range evs {
				if e.Kind == EventState && e.State == StateWaitingInput {
					t.Fatalf("round %d: block %d (%q, which never reads the terminal) went through state waiting_input; events: %+v", i+1, r.Block.N, r.Block.Command, evs)
				}
			}
		}
	})
}

// TestRelativeRuntimeDir starts shells whose runtime dir is relative to the
// process's cwd (fleetmux dev's default data dir is ./.fleetmux) and whose own cwd
// is elsewhere: the integration must still load (it was given to the shell as a
// relative path, which it resolved against its own cwd, and no mark ever came).
func TestRelativeRuntimeDir(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	if err := os.Mkdir("rt", 0o700); err != nil {
		t.Fatal(err)
	}
	for _, shell := range shells {
		t.Run(shell, func(t *testing.T) {
			s := startShell(t, shell, func(c *Config) { c.RuntimeDir = "rt" })
			r := run(t, s, "echo rel-$((6*7))")
			if r.Text != "rel-42" || exitCode(r) != 0 {
				t.Fatalf("run: %q exit %d", r.Text, exitCode(r))
			}
		})
	}
}

// TestCloseHangsUpShell closes sessions right after a command, when the shell is
// between the end of the command and its next read of the terminal. The shell must
// end by the hangup, never by the SIGKILL that follows the grace:
// bash can take a SIGHUP just before it blocks in readline's pselect and then sit
// there, so a single SIGHUP was sometimes lost (every fan-out in a fresh session
// then took 2 s longer, the grace). Timing plays no part in the assertion.
func TestCloseHangsUpShell(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		const rounds = 40
		for i := range rounds {
			s := startShell(t, shell)
			run(t, s, "true")
			if err := s.Close(); err != nil {
				t.Fatalf("round %d: Close: %v", i+1, err)
			}
			// bash dies of the SIGHUP (129); zsh catches it and exits 1.
			info := s.Info()
			if info.ExitCode == nil || *info.ExitCode == 128+int(syscall.SIGKILL) {
				got := "none"
				if info.ExitCode != nil {
					got = strconv.Itoa(*info.ExitCode)
				}
				t.Fatalf("round %d of %d: %s closed with exit %s: the hangup was lost and the shell was killed after the grace", i+1, rounds, shell, got)
			}
		}
	})
}
func TestUserRCSourced(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		home := t.TempDir()
		rc := map[string]string{"bash": ".bashrc", "zsh": ".zshrc"}[shell]
		if err := os.WriteFile(filepath.Join(home, rc), []byte("FM_FROM_RC=yes\nalias fmalias='echo aliased'\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if shell == "zsh" {
			os.WriteFile(filepath.Join(home, ".zshenv"), []byte("FM_FROM_ENV=env\n"), 0o600)
		}
		s := startShell(t, shell, func(c *Config) {
			c.BaseEnv = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
			c.Dir = home
		})
		if r := run(t, s, "echo $FM_FROM_RC"); r.Text != "yes" {
			t.Fatalf("user rc not sourced: %q", r.Text)
		}
		if r := run(t, s, "fmalias"); r.Text != "aliased" {
			t.Fatalf("alias from user rc: %q", r.Text)
		}
		if shell == "zsh" {
			if r := run(t, s, "echo $FM_FROM_ENV ${ZDOTDIR-unset}"); r.Text != "env unset" {
				t.Fatalf("zsh: user .zshenv / ZDOTDIR restore: %q", r.Text)
			}
		}
	})
}

func TestBadInput(t *testing.T) {
	if _, err := Start(Config{Shell: "fish"}); !errors.Is(err, ErrUnknownShell) {
		t.Errorf("unknown shell: %v", err)
	}
	if _, err := Start(Config{Shell: "bash", Dir: "/nonexistent/dir"}); !errors.Is(err, ErrBadCwd) {
		t.Errorf("bad cwd: %v", err)
	}
	if _, err := Start(Config{Shell: "bash", Dir: "/etc/hostname"}); !errors.Is(err, ErrBadCwd) {
		t.Errorf("cwd is a file: %v", err)
	}
	if _, err := Start(Config{Argv: []string{"/nonexistent/prog"}}); !errors.Is(err, ErrStart) {
		t.Errorf("missing program: %v", err)
	}
	if _, err := Start(Config{Shell: "bash", Env: []string{"NOEQUALS"}}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("bad env: %v", err)
	}
	if _, err := Start(Config{Shell: "bash", Cols: 5000}); !errors.Is(err, ErrBadConfig) {
		t.Errorf("bad size: %v", err)
	}
	s := startShell(t, "bash")
	ctx := ctxT(t)
	if err := s.SendKeys("Enter", "C-nope"); !errors.Is(err, ErrBadKey) {
		t.Errorf("bad key: %v", err)
	}
	if _, err := s.Run(ctx, "  \n ", RunOptions{}); !errors.Is(err, ErrEmptyCommand) {
		t.Errorf("empty command: %v", err)
	}
	if _, err := s.Run(ctx, strings.Repeat("x", api.MaxCommandBytes+1), RunOptions{}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("huge command: %v", err)
	}
	if err := s.Input(make([]byte, api.MaxInputBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("huge input: %v", err)
	}
	if _, err := s.Wait(ctx, "soon", 0); !errors.Is(err, ErrBadConfig) {
		t.Errorf("bad wait condition: %v", err)
	}
	if _, err := s.BlockText(99, TextOptions{}); !errors.Is(err, ErrNoBlock) {
		t.Errorf("unknown block: %v", err)
	}
	if r := run(t, s, "echo ("); exitCode(r) != 2 || !strings.Contains(r.Text, "syntax error") {
		t.Errorf("syntax error: exit %d text %q; want bash's 2 and the message", exitCode(r), r.Text)
	}
	if r := run(t, s, "echo still-works"); r.Text != "still-works" {
		t.Errorf("after syntax error: %q", r.Text)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Run(ctx, "echo", RunOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if err := s.Input([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Input after Close: %v", err)
	}
	if _, err := s.Screen(); !errors.Is(err, ErrClosed) {
		t.Errorf("Screen after Close: %v", err)
	}
}

func TestProgramWithoutIntegration(t *testing.T) {
	s, err := Start(Config{Argv: []string{"cat"}, Dir: t.TempDir(), RuntimeDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxT(t)
	if _, err := s.Wait(ctx, UntilWaitingInput, 0); err != nil {
		t.Fatal(err)
	}
	r := run(t, s, "hello cat")
	if r.Text != "hello cat" || r.Block.ExitCode != nil || !r.Block.Fallback {
		t.Fatalf("cat: %q exit %v", r.Text, r.Block.ExitCode)
	}
	if err := s.SendKeys("C-d"); err != nil {
		t.Fatal(err)
	}
	info, err := s.Wait(ctx, UntilExited, 0)
	if err != nil || info.ExitCode == nil || *info.ExitCode != 0 {
		t.Fatalf("cat after C-d: %+v, %v", info, err)
	}
}

func TestResize(t *testing.T) {
	s := startShell(t, "bash")
	if err := s.Resize(132, 43); err != nil {
		t.Fatal(err)
	}
	if r := run(t, s, "stty size"); r.Text != "43 132" {
		t.Fatalf("stty size after resize: %q", r.Text)
	}
	if scr, _ := s.Screen(); scr.Cols != 132 || scr.Rows != 43 {
		t.Fatalf("screen size %dx%d", scr.Cols, scr.Rows)
	}
	if err := s.Resize(0, 10); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("bad resize: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestTypedCommandAndEvents(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		ctx := ctxT(t)
		if _, err := s.Wait(ctx, UntilIdle, 0); err != nil {
			t.Fatal(err)
		}
		// A person types a command (no Run): it still becomes a block with its text.
		if err := s.Input([]byte("echo typed-$((2+3))\r")); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, func() bool {
			b, err := s.Block(1)
			return err == nil && b.State == BlockDone
		}, "typed command's block to finish")
		r, err := s.BlockText(1, TextOptions{})
		if err != nil || r.Block.Command != "echo typed-$((2+3))" || r.Text != "typed-5" || exitCode(r) != 0 {
			t.Fatalf("typed block: command %q text %q exit %d, %v", r.Block.Command, r.Text, exitCode(r), err)
		}
		run(t, s, "(exit 9)")
		run(t, s, "exit")
		if _, err := s.Wait(ctx, UntilExited, 0); err != nil {
			t.Fatal(err)
		}
		evs, last := s.Events(0)
		if len(evs) == 0 || evs[len(evs)-1].Seq != last {
			t.Fatalf("events: %d, last seq %d", len(evs), last)
		}
		var kinds []string
		finished := map[int]*int{}
		for i, e := range evs {
			if e.Seq != uint64(i+1) {
				t.Fatalf("event %d has seq %d", i, e.Seq)
			}
			kinds = append(kinds, string(e.Kind)+":"+string(e.State))
			if e.Kind == EventBlockFinished {
				finished[e.Block.N] = e.Block.ExitCode
			}
		}
		got := strings.Join(kinds, " ")
		for _, want := range []string{"created:starting", "state:idle", "block_started:", "state:running", "block_finished:", "exited:", "state:exited"} {
			if !strings.Contains(got, want) {
				t.Errorf("events lack %q: %s", want, got)
			}
		}
		if c := finished[2]; c == nil || *c != 9 {
			t.Errorf("block_finished event of (exit 9) carries %v", c)
		}
		if more, _ := s.Events(last); len(more) != 0 {
			t.Errorf("Events(last) returned %d events", len(more))
		}
	})
}

// TestRunRightAfterProgramQuits: a program waits for input (head), keys make it
// quit, and a Run follows at once, while the shell is between the program's end
// and its next prompt. The Run's command is the shell's next block with its own
// output and exit code: it was typed into "the waiting program" as a fallback
// block before (the last sample still said waiting, now of the shell reading its
// line editor), and came back with the wrong block's text.
func TestRunRightAfterProgramQuits(t *testing.T) {
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		ctx := ctxT(t)
		for i := range 5 {
			r, err := s.Run(ctx, "head -n 1", RunOptions{Timeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Wait(ctx, UntilWaitingInput, 0); err != nil {
				t.Fatal(err)
			}
			if err := s.Input([]byte("line" + itoa(i) + "\r")); err != nil {
				t.Fatal(err)
			}
			next, err := s.Run(ctx, "echo back"+itoa(i), RunOptions{Timeout: 10 * time.Second})
			if err != nil {
				t.Fatalf("run after quit: %v", err)
			}
			if next.Block.Fallback || next.Text != "back"+itoa(i) || exitCode(next) != 0 || next.Block.N != r.Block.N+1 {
				t.Fatalf("run after quit: block %d (head's %d) fallback %v exit %d text %q", next.Block.N, r.Block.N, next.Block.Fallback, exitCode(next), next.Text)
			}
		}
	})
}
