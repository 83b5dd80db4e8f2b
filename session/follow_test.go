package session

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// closedNow reports whether ch is closed, without waiting.
func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// While a Run waits, its changes reach the followers FollowDelay late at the
// earliest, after those waiting on Noted; with no Run waiting they reach them in the
// same step as everyone else.
func TestFollowersHeldWhileRunWaits(t *testing.T) {
	s := startShell(t, "bash")
	ctx := ctxT(t)
	run(t, s, "true") // the first prompt is out
	// Until the last run's held changes are out, and the sampler's last step (a
	// timer: it may still change the state, with no run waiting) is done, the
	// channels would close early, both in one step.
	testutil.Eventually(t, 5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.follow.armed && !s.poll.armed && !s.poll.running && s.state == StateIdle
	}, "the last run's changes released and the sampler quiet")
	s.mu.Lock()
	noted, followed := s.noted, s.follow.note
	s.mu.Unlock()
	stamp := func(ch <-chan struct{}) <-chan time.Time {
		at := make(chan time.Time, 1)
		go func() { // ends when ch closes or the test's ctx ends
			select {
			case <-ch:
				at <- time.Now()
			case <-ctx.Done():
			}
		}()
		return at
	}
	notedAt, followedAt := stamp(noted), stamp(followed)
	t0 := time.Now()
	res := run(t, s, "echo held")
	if exitCode(res) != 0 {
		t.Fatalf("run: %+v", res)
	}
	var n, f time.Time
	select {
	case n = <-notedAt:
	case <-ctx.Done():
		t.Fatal("Noted never closed")
	}
	select {
	case f = <-followedAt:
	case <-ctx.Done():
		t.Fatal("Followed never closed after the run")
	}
	if f.Before(n) {
		t.Fatalf("a follower heard of the run %v before Noted did", n.Sub(f))
	}
	if d := f.Sub(t0); d < FollowDelay {
		t.Fatalf("a follower heard of the run %v after it started, within FollowDelay %v", d, FollowDelay)
	}

	// No Run waiting: typed input is echoed, and by the time a plain viewer has the
	// echo, the followers' channel has closed too.
	_, from := s.Offsets()
	plain := s.Subscribe(from, ViewerOptions{})
	s.mu.Lock()
	out := s.followedOutputLocked()
	s.mu.Unlock()
	if err := s.Input([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if !closedNow(out) {
		t.Fatal("with no Run waiting, the echo reached a plain viewer but not the followers")
	}
}

// The held changes come when FollowDelay has passed, also when the Run is still
// waiting then (a long command's output keeps flowing to followers).
func TestFollowersReleasedDuringLongRun(t *testing.T) {
	s := startShell(t, "bash")
	ctx := ctxT(t)
	run(t, s, "true")
	_, from := s.Offsets()
	v := s.Subscribe(from, ViewerOptions{Linger: time.Millisecond})
	done := make(chan error, 1)
	go func() { // the Run under test; joined below
		_, err := s.Run(ctx, "echo early; read -t 30 x", RunOptions{Timeout: 30 * time.Second})
		done <- err
	}()
	var got []byte
	for !strings.Contains(string(got), "early\r\n") {
		c, err := v.Next(ctx)
		if err != nil {
			t.Fatalf("follower saw %q before: %v", got, err)
		}
		got = append(got, c.Data...)
	}
	if !s.Awaited() {
		t.Fatal("the Run should still be waiting")
	}
	if err := s.Input([]byte("\r")); err != nil { // ends read
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A Run's command is pasted even when it is one plain line: typed key by key, the
// user's readline bindings would act on it (here a vi-mode "jj" escape, which
// would drop to command mode and let the x delete a character).
func TestRunIgnoresKeyBindings(t *testing.T) {
	inputrc := filepath.Join(t.TempDir(), "inputrc")
	rc := "set editing-mode vi\n$if mode=vi\nset keymap vi-insert\n\"jj\": vi-movement-mode\n$endif\n"
	if err := os.WriteFile(inputrc, []byte(rc), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startShell(t, "bash", func(c *Config) { c.Env = append(c.Env, "INPUTRC="+inputrc) })
	if res := run(t, s, "echo hajjx"); !strings.Contains(res.Text, "hajjx") {
		t.Fatalf("text %q, want hajjx", res.Text)
	}
}

// A command with a Tab in it is pasted, so the Tab is part of the command and
// does not complete.
func TestRunCommandWithTab(t *testing.T) {
	for _, sh := range []string{"bash", "zsh"} {
		t.Run(sh, func(t *testing.T) {
			s := startShell(t, sh)
			res := run(t, s, "x='a\tb'; echo len=${#x}")
			if !strings.Contains(res.Text, "len=3") {
				t.Fatalf("text %q, want len=3", res.Text)
			}
		})
	}
}
