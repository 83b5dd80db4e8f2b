package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// startFullScreen runs program (a command line) in s and waits until it fills
// the screen and reads the terminal; it returns its block.
func startFullScreen(t *testing.T, s *Session, program string) int {
	t.Helper()
	ctx := ctxT(t)
	r, err := s.Run(ctx, program, RunOptions{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Run(%q): %v", program, err)
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		scr, err := s.Screen()
		return err == nil && scr.WaitingInput && strings.Count(scr.Text, "\n") > 10
	}, "%s on the screen, reading the terminal", program)
	return r.Block.N
}

// TestRunRefusesFullScreen: with vim, top or less in front, Run types nothing
// and fails busy naming the program (the old code typed "echo hi" into them:
// top took the e as a key); once the program is gone Run runs again. With
// TypeAnyway the command line is typed into the program (vim's :q! quits it).
// The screen names the program in front.
func TestRunRefusesFullScreen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "notes.txt")
	var lines strings.Builder
	for i := range 100 {
		fmt.Fprintf(&lines, "line %d\n", i)
	}
	if err := os.WriteFile(file, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	progs := []struct {
		name, cmd string
		quit      []string
	}{
		{"vim", testutil.NeedTool(t, "vim") + " -u NONE -i NONE -N -n " + file, []string{"Esc", ":", "q", "!", "Enter"}},
		{"top", testutil.NeedTool(t, "top") + " -d 5", []string{"q"}},
		{"less", testutil.NeedTool(t, "less") + " " + file, []string{"q"}},
	}
	forEachShell(t, func(t *testing.T, shell string) {
		s := startShell(t, shell)
		for _, p := range progs {
			n := startFullScreen(t, s, p.cmd)
			before := s.Info().OutputOffset
			_, err := s.Run(ctxT(t), "echo hi", RunOptions{Timeout: 5 * time.Second})
			var fe *FullScreenError
			if !errors.Is(err, ErrBusy) || !errors.As(err, &fe) || !strings.HasPrefix(fe.Program, p.name) {
				t.Fatalf("%s: Run = %v, want a busy full-screen error naming %s", p.name, err, p.name)
			}
			for _, w := range []string{p.name + " is running full-screen", "send_keys", "read_screen", "type_anyway"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q does not say %q", p.name, err, w)
				}
			}
			if scr, err := s.Screen(); err != nil || !scr.FullScreen || !strings.HasPrefix(scr.Program, p.name) {
				t.Errorf("%s: screen says program %q full screen %v (%v)", p.name, scr.Program, scr.FullScreen, err)
			}
			if got := len(s.Blocks()); got != n {
				t.Errorf("%s: %d blocks after the refusal, want %d (nothing typed)", p.name, got, n)
			}
			if p.name == "vim" {
				// Typed anyway: the line goes to vim, whose :q! quits it.
				r, err := s.Run(ctxT(t), ":q!", RunOptions{Timeout: 10 * time.Second, TypeAnyway: true})
				if err != nil {
					t.Fatalf("vim: Run(:q!, TypeAnyway) = %v (output since the refusal from %d)", err, before)
				}
				if !r.Block.Fallback {
					t.Errorf("vim: the typed line is block %+v, want a block typed into the program", r.Block)
				}
			} else if err := s.SendKeys(p.quit...); err != nil {
				t.Fatal(err)
			}
			if r, err := s.WaitBlock(ctxT(t), n, RunOptions{Timeout: 15 * time.Second}); err != nil || r.Block.State != BlockDone {
				t.Fatalf("%s: its block after quitting: %+v, %v", p.name, r.Block, err)
			}
			testutil.Eventually(t, 10*time.Second, func() bool { return s.Info().State == StateIdle }, "%s: idle after quitting", p.name)
			if r := run(t, s, "echo hi"); r.Text != "hi" || exitCode(r) != 0 {
				t.Fatalf("after %s: %q exit %d", p.name, r.Text, exitCode(r))
			}
			if scr, _ := s.Screen(); scr.FullScreen || scr.Program != "" {
				t.Errorf("after %s, at the prompt: screen says program %q full screen %v", p.name, scr.Program, scr.FullScreen)
			}
		}
	})
}
