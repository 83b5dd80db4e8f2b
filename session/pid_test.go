package session

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// pidState is the state letter of pid in /proc (0: no such process).
func pidState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// TestExitedShellKeepsItsPid: once a session's shell exited, its pid stays the
// session's (an unreaped zombie, kept by this process or the holder) until Close,
// which signals the session's processes by that pid and its process group: the
// review's attack steered an exited session's pid to an unrelated `sleep` (as root,
// with ns_last_pid) and Close killed it. Now the pid cannot be given away while
// the session is open, and after Close no zombie is left behind.
func TestExitedShellKeepsItsPid(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "local", true: "holder"}[held], func(t *testing.T) {
			var mod []func(*Config)
			if held {
				dir := startHolder(t)
				mod = append(mod, func(c *Config) { c.Holder = dialHolder(t, dir) })
			}
			s := startShell(t, "bash", mod...)
			pid := s.Pid()
			if err := s.Input([]byte("exit 4\r")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Wait(ctxT(t), UntilExited, 0); err != nil {
				t.Fatal(err)
			}
			if st := pidState(pid); st != 'Z' {
				t.Fatalf("the exited shell's pid %d is %q in /proc, want its zombie (Z) kept until Close", pid, st)
			}
			if os.Geteuid() == 0 {
				if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
					t.Fatal(err)
				}
			}
			other := exec.Command("sleep", "100")
			if err := other.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
			if other.Process.Pid == pid {
				t.Fatalf("an unrelated process got the pid %d of an open session's shell", pid)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 10*time.Second, func() bool { return pidState(pid) == 0 }, "the zombie %d is reaped once the session is closed", pid)
			if st := pidState(other.Process.Pid); st == 0 || st == 'Z' {
				t.Fatalf("closing the session ended an unrelated process (%q)", st)
			}
		})
	}
}
