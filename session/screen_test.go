package session

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

func TestFullScreenProgramsOnScreen(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pager.txt")
	var content strings.Builder
	for i := 1; i <= 200; i++ {
		content.WriteString("pager line " + strconv.Itoa(i) + "\n")
	}
	if err := os.WriteFile(file, []byte(content.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		prog, cmd, want, quit string
		alt                   bool
	}{
		{"less", "less " + file, "pager line 29", "q", true},
		{"top", "top -d 0.5", "PID USER", "q", false}, // procps top redraws the main screen
	}
	for _, c := range cases {
		t.Run(c.prog, func(t *testing.T) {
			testutil.NeedTool(t, c.prog)
			s := startShell(t, "bash")
			ctx := ctxT(t)
			r, err := s.Run(ctx, c.cmd, RunOptions{Timeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var scr Screen
			testutil.Eventually(t, 10*time.Second, func() bool {
				scr, _ = s.Screen()
				return scr.AltScreen == c.alt && strings.Contains(scr.Text, c.want) && s.Info().State == StateWaitingInput
			}, "%s on the screen (alt %v), waiting for input", c.prog, c.alt)
			if c.prog == "less" && (!strings.HasPrefix(scr.Text, "pager line 1\n") || strings.Contains(scr.Text, "pager line 30\n")) {
				t.Fatalf("less screen (30 rows) shows the wrong lines:\n%s", scr.Text)
			}
			if err := s.SendKeys(c.quit); err != nil {
				t.Fatal(err)
			}
			if r, err = s.WaitBlock(ctx, r.Block.N, RunOptions{Timeout: 10 * time.Second}); err != nil || exitCode(r) != 0 {
				t.Fatalf("after quitting %s: exit %d, %v", c.prog, exitCode(r), err)
			}
			if scr, _ := s.Screen(); scr.AltScreen {
				t.Fatalf("%s: still on the alternate screen", c.prog)
			}
		})
	}
}

func TestScreenAfterFloodIsQuickAndRight(t *testing.T) {
	s := startShell(t, "bash")
	// 120,000 empty lines and then a marker: the emulator must not render them all.
	run(t, s, "head -c 120000 /dev/zero | tr '\\0' '\\n'; echo flood-end")
	start := time.Now()
	scr, err := s.Screen()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if !strings.Contains(scr.Text, "flood-end") {
		t.Fatalf("screen after the flood lacks its last line:\n%s", scr.Text)
	}
	// A generous bound (rendering every line took seconds): this is a behaviour check,
	// the speed itself is measured in bench/.
	if took > 2*time.Second {
		t.Fatalf("Screen took %v after a flood of lines", took)
	}
	// A program that enters the alternate screen and then floods it: the skip keeps
	// the alternate screen on.
	r, err := s.Run(ctxT(t), "printf '\\033[?1049h'; head -c 400000 /dev/zero | tr '\\0' '\\n'; printf 'on-alt'; read x", RunOptions{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctxT(t), UntilWaitingInput, 0); err != nil {
		t.Fatal(err)
	}
	scr, _ = s.Screen()
	if !scr.AltScreen || !strings.Contains(scr.Text, "on-alt") {
		t.Fatalf("after a flood on the alternate screen: alt %v\n%s", scr.AltScreen, scr.Text)
	}
	s.Input([]byte("\n"))
	s.WaitBlock(ctxT(t), r.Block.N, RunOptions{Timeout: 10 * time.Second})
}

// fedAndEnd is how far the emulator has been fed, and the output's end.
func fedAndEnd(s *Session) (fed, end int64) {
	s.screen.mu.Lock()
	fed = s.screen.fed
	s.screen.mu.Unlock()
	_, end = s.Offsets()
	return fed, end
}

// On the main screen the emulator renders only when the screen is asked for; on the
// alternate screen it follows the output by itself.
func TestScreenRenderedOnDemandOnMainScreen(t *testing.T) {
	s := startShell(t, "bash")
	// Each command lasts longer than the feeder's debounce: a feeder following the
	// output would have rendered some of it by the end.
	for i := 1; i <= 5; i++ {
		run(t, s, "sleep 0.05; echo main-line-"+strconv.Itoa(i))
	}
	if fed, end := fedAndEnd(s); fed != 0 {
		t.Fatalf("the emulator was fed %d of %d bytes on the main screen, nobody asked", fed, end)
	}
	scr, err := s.Screen()
	if err != nil || !strings.Contains(scr.Text, "main-line-5") || scr.AltScreen {
		t.Fatalf("screen on demand: alt %v, %v\n%s", scr.AltScreen, err, scr.Text)
	}
	if fed, end := fedAndEnd(s); fed != end {
		t.Fatalf("after Screen: fed %d of %d", fed, end)
	}

	testutil.NeedTool(t, "less")
	file := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(file, []byte("alt-screen-text\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(ctxT(t), "less "+file, RunOptions{Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctxT(t), UntilWaitingInput, 0); err != nil {
		t.Fatal(err)
	}
	// Without a Screen call, the feeder catches up with less's drawing.
	testutil.Eventually(t, 10*time.Second, func() bool {
		fed, end := fedAndEnd(s)
		return fed == end
	}, "the emulator follows the alternate screen by itself")
	if err := s.SendKeys("q"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitBlock(ctxT(t), r.Block.N, RunOptions{Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
}

// Between a command's end (D) and its next prompt (A) the poller leaves the kernel
// alone for pendingGrace: the prompt comes by itself (every Run used to pay for a
// /proc sample here). Before the first prompt, and when the prompt is late, it
// samples.
func TestNoSampleBetweenEndAndPrompt(t *testing.T) {
	s := startShell(t, "bash")
	run(t, s, "true")
	cases := []struct {
		name       string
		finished   time.Duration // how long ago the last block finished
		seenPrompt bool
		wantLater  bool // notBefore in the future
	}{
		{"just ended", 0, true, true},
		{"prompt late", -time.Second, true, false},
		{"before the first prompt", 0, false, false},
	}
	for _, c := range cases {
		s.mu.Lock()
		saved := *s.blocks[len(s.blocks)-1]
		savedSeen, savedAt, savedState := s.seenPrompt, s.atPrompt, s.state
		s.blocks[len(s.blocks)-1].FinishedAt = time.Now().Add(c.finished)
		s.seenPrompt, s.atPrompt, s.state = c.seenPrompt, false, StateRunning
		s.mu.Unlock()
		need, _, notBefore := s.needsPoll()
		s.mu.Lock()
		*s.blocks[len(s.blocks)-1] = saved
		s.seenPrompt, s.atPrompt, s.state = savedSeen, savedAt, savedState
		s.mu.Unlock()
		if !need || time.Until(notBefore) > 0 != c.wantLater {
			t.Errorf("%s: need %v, sample in %v; want a wait %v", c.name, need, time.Until(notBefore), c.wantLater)
		}
	}
}

// A command typed at the prompt (not through Run) that goes quiet reading must reach
// waiting_input: its C mark, which makes it running, may come right after the echo of
// the typing, and the poller must hear about it (a rate limit on the read loop's
// wake-ups once dropped it, leaving the state "running" for good).
func TestTypedReadReachesWaitingInput(t *testing.T) {
	s := startShell(t, "bash")
	ctx := ctxT(t)
	run(t, s, "true")
	for i := range 30 {
		if _, err := s.Wait(ctx, UntilIdle, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Input([]byte("read x\r")); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.Wait(wctx, UntilWaitingInput, 0)
		cancel()
		if err != nil {
			t.Fatalf("round %d: typed `read x` never reached waiting_input (state %s): %v", i, s.Info().State, err)
		}
		if err := s.Input([]byte("y\r")); err != nil {
			t.Fatal(err)
		}
	}
}

// An idle session nobody looks at has no emulator; one built for a look is dropped
// screenDrop after it, and the next look builds it again from the ring, showing the
// same screen.
func TestScreenBuiltOnDemandAndDropped(t *testing.T) {
	s := startShell(t, "bash")
	for i := 1; i <= 3; i++ {
		run(t, s, "echo line-"+strconv.Itoa(i))
	}
	emu := func() emulator {
		s.screen.mu.Lock()
		defer s.screen.mu.Unlock()
		return s.screen.emu
	}
	if emu() != nil {
		t.Fatal("an emulator was built before anybody asked for a screen")
	}
	before, err := s.Screen()
	if err != nil || !strings.Contains(before.Text, "line-3") || emu() == nil {
		t.Fatalf("screen: %v\n%s", err, before.Text)
	}
	s.screen.mu.Lock()
	s.screen.used = time.Now().Add(-screenDrop) // as if the last look was screenDrop ago
	s.screen.mu.Unlock()
	s.screen.dropIdle()
	if emu() != nil {
		t.Fatal("the emulator was kept after screenDrop without a look")
	}
	after, err := s.Screen()
	if err != nil || after.Text != before.Text || after.Cursor != before.Cursor || after.AltScreen {
		t.Fatalf("rebuilt screen differs: %v\nbefore:\n%s\nafter:\n%s", err, before.Text, after.Text)
	}
	// A look that is recent keeps it.
	s.screen.dropIdle()
	if emu() == nil {
		t.Fatal("the emulator was dropped right after a look")
	}
}

// A program that draws on the main screen by moving the cursor (as Claude Code's
// renderer does) keeps what it drew before a burst of frames: the emulator must
// not skip output whose later frames rely on it, as it may skip plain lines.
func TestScreenKeepsCursorDrawingOnMainScreen(t *testing.T) {
	s := startShell(t, "bash")
	run(t, s, `printf '\033[2J\033[1;1HHEADER-KEPT'; for i in $(seq 400); do printf '\033[10;1Hframe %d\n' $i; done; printf '\033[12;1Hdone-marker\n'`)
	scr, err := s.Screen()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(scr.Text, "done-marker") || !strings.Contains(scr.Text, "frame 400") {
		t.Fatalf("the last frame is not on the screen:\n%s", scr.Text)
	}
	if !strings.HasPrefix(scr.Text, "HEADER-KEPT") {
		t.Fatalf("the header drawn before the frames is lost:\n%s", scr.Text)
	}
}
