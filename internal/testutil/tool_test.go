package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a helper ended the test.
type recorder struct {
	testing.TB
	ended string // "skip", "fatal" or "" (the helper returned)
	msg   string
}

func (r *recorder) Helper() {}
func (r *recorder) Logf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
}
func (r *recorder) Skipf(format string, args ...any) {
	r.ended, r.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.ended, r.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// call runs f on a recorder in its own goroutine, as the testing package does.
func call(f func(testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestMissingTool(t *testing.T) {
	const tool = "fleetmux-no-such-tool"
	cases := []struct {
		strict    string
		need      func(testing.TB)
		wantEnded string
	}{
		{"", func(t testing.TB) { NeedTool(t, tool) }, "skip"},
		{"1", func(t testing.TB) { NeedTool(t, tool) }, "fatal"},
		{"", func(t testing.TB) { WantTool(t, tool) }, ""},
		{"1", func(t testing.TB) { WantTool(t, tool) }, "fatal"},
		{"", func(t testing.TB) { Missing(t, "%s", tool) }, "skip"},
		{"1", func(t testing.TB) { Missing(t, "%s", tool) }, "fatal"},
	}
	for i, c := range cases {
		t.Setenv(StrictEnv, c.strict)
		r := call(c.need)
		if r.ended != c.wantEnded || !strings.Contains(r.msg, tool) {
			t.Errorf("case %d (strict %q): ended %q with %q, want %q naming %s", i, c.strict, r.ended, r.msg, c.wantEnded, tool)
		}
	}
	t.Setenv(StrictEnv, "1")
	if r := call(func(t testing.TB) { NeedTool(t, "go") }); r.ended != "" {
		t.Errorf("NeedTool(go) ended the test: %s", r.msg)
	}
}
