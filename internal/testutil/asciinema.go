package testutil

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// RunAsciinema runs the asciinema CLI with args and returns its stdout. asciinema 2.2
// opens /dev/tty even for `cat` (and fails without one), so it gets a fresh PTY as its
// controlling terminal, while its stdout stays a pipe: the bytes it prints arrive
// untouched by any terminal.
func RunAsciinema(t testing.TB, bin string, args ...string) []byte {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "ASCIINEMA_CONFIG_HOME="+home, "LC_ALL=C.UTF-8", "PYTHONIOENCODING=utf-8")
	err = cmd.Run()
	tty.Close()
	if err != nil {
		t.Fatalf("asciinema %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}
