package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestOpenSSH drives the SSH front door of `fleetmux dev` with the real OpenSSH
// client: verbs print and exit as the CLI does.
func TestOpenSSH(t *testing.T) {
	sshBin := testutil.NeedProgram(t, "ssh")
	keygen := testutil.NeedProgram(t, "ssh-keygen")
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	testutil.RunProgram(t, keygen, "-q", "-t", "ed25519", "-N", "", "-C", "tester", "-f", key)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, append([]byte("role=operator "), pub...), 0o600); err != nil {
		t.Fatal(err)
	}
	startDev(t, "--ssh-listen", "127.0.0.1:0", "--authorized-keys", ak)
	m := regexp.MustCompile(`ssh -p (\d+) 127\.0\.0\.1`).FindStringSubmatch(devOut)
	if m == nil {
		t.Fatalf("dev did not print its SSH address:\n%s", devOut)
	}
	ssh := func(args ...string) (string, string, int) {
		t.Helper()
		full := append([]string{"-p", m[1], "-i", key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-F", "/dev/null", "127.0.0.1"}, args...)
		cmd := exec.Command(sshBin, full...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	out, errs, code := ssh("new")
	if code != 0 || out != "here/s1\n" {
		t.Fatalf("ssh new: %q %q %d", out, errs, code)
	}
	out, errs, code = ssh("run", "here/s1", "--", `'echo hi; (exit 3)'`)
	if code != 3 || out != "hi\n" {
		t.Fatalf("ssh run: %q %q exit %d, want hi and 3", out, errs, code)
	}
	out, _, code = ssh("ls")
	if code != 0 || !strings.Contains(out, "here/s1") {
		t.Fatalf("ssh ls: %q %d", out, code)
	}
	// An operator may not kill; a server verb is not a command here.
	if _, errs, code := ssh("kill", "here/s1"); code != 1 || !strings.Contains(errs, "admin role") {
		t.Fatalf("ssh kill as operator: %q %d", errs, code)
	}
	if _, _, code := ssh("try", "--", "id"); code != 2 {
		t.Fatalf("ssh try: exit %d, want 2", code)
	}
}
