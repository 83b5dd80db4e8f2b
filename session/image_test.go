package session

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// midExec is /proc/PID/stat of pid as it reads in the middle of an exec, after the
// child's close-on-exec descriptors closed (exec.Cmd.Start returns then) and before
// the kernel set the new image's argument and environment addresses.
func midExec(t *testing.T, pid int) []byte {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+2:]))
	f[46], f[47], f[48] = "0", "0", "0" // arg_end, env_start, env_end
	return []byte(string(b[:i+2]) + strings.Join(f, " ") + "\n")
}

// TestParseImage: an image read whole is one; one read in the middle of an exec
// (addresses in part 0, no command line) is not known, never an image of its own.
func TestParseImage(t *testing.T) {
	self := os.Getpid()
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(self) + "/stat")
	cl, _ := os.ReadFile("/proc/" + strconv.Itoa(self) + "/cmdline")
	if img, ok := parseImage(stat, cl); !ok || img.cmdline == "" || strings.Contains(" "+img.addrs+" ", " 0 ") {
		t.Fatalf("this process's image: %+v %v", img, ok)
	}
	if img, ok := parseImage(midExec(t, self), nil); ok || img != (procImage{}) {
		t.Fatalf("an image read mid-exec: %+v %v, want none", img, ok)
	}
	if _, ok := parseImage(stat, nil); ok {
		t.Fatal("an image without its command line was taken whole")
	}
}

// TestImageReadMidExec: a session whose start read the shell's image in the middle
// of its exec (a loaded host) does not take the shell's own image for another
// program's when it samples the shell reading its terminal between a command's end
// and the prompt mark: the integration stays ok (on the old code it was "lost", and
// the guard then refused the next run's own line as nobody's). The image is learnt
// at the next prompt, and an exec is still seen.
func TestImageReadMidExec(t *testing.T) {
	testutil.NeedTool(t, "bash")
	s := startShell(t, "bash")
	// The sample looks at the image only while the shell reads its terminal: at
	// its prompt, once it got there.
	reading := func() {
		testutil.Eventually(t, 10*time.Second, func() bool {
			pg, err := foregroundPgrp(s.master)
			if err != nil || pg <= 0 {
				return false
			}
			w, byShell := fgWaitingForInput(s.pid, pg, s.tty)
			return w && byShell
		}, "the shell to read its terminal")
	}
	run(t, s, "true")
	reading()
	img, _ := parseImage(midExec(t, s.pid), nil)
	s.mu.Lock()
	s.image = img
	s.atPrompt = false // as between the prompt hook's D mark and the prompt's A
	s.mu.Unlock()
	s.sample()
	if in := s.Info(); in.Integration != IntegrationOK {
		t.Fatalf("integration %q after a sample of the shell reading its terminal, want ok", in.Integration)
	}
	run(t, s, "true")
	want, ok := readImage(s.pid)
	if !ok {
		t.Fatal("the shell's image cannot be read")
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.image == want
	}, "the shell's image to be learnt at its prompt")
	// An exec is still seen: another program's image is not the shell's.
	s.mu.Lock()
	s.image.cmdline += "x"
	s.atPrompt = false
	s.mu.Unlock()
	reading()
	s.sample()
	if in := s.Info(); in.Integration != IntegrationLost {
		t.Fatalf("integration %q with another image, want lost", in.Integration)
	}
}
