package testutil

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"
)

// RunProgram runs a program to completion (at most a minute) and returns its stdout;
// a failure fails the test with its stderr.
func RunProgram(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, errb.String())
	}
	return out.Bytes()
}
