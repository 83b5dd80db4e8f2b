package ptyio

import (
	"errors"
	"os/exec"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill -KILL $$", 137},
		{"kill -TERM $$", 143},
	} {
		if got := ExitCode(exec.Command("sh", "-c", tc.script).Run()); got != tc.want {
			t.Errorf("%q: ExitCode = %d, want %d", tc.script, got, tc.want)
		}
	}
	if got := ExitCode(errors.New("not a wait error")); got != -1 {
		t.Errorf("an error that is no exit: %d, want -1", got)
	}
}
