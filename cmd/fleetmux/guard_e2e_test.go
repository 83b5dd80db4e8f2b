package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestOpenSSHGuardTypedLines: on `fleetmux dev`, a person attached with OpenSSH
// (`ssh -tt NODE+ID@…`) to a bash and a zsh session types lines the policy denies:
// neither runs, whether the node refuses the input (the whole line) or the shell's own
// check does (the line editor rearranged it: C-a), and the attach names the rule; an
// allowed line typed there runs.
func TestOpenSSHGuardTypedLines(t *testing.T) {
	sshBin := testutil.NeedTool(t, "ssh")
	keygen := testutil.NeedTool(t, "ssh-keygen")
	dir := t.TempDir()
	key := filepath.Join(dir, "op")
	testutil.RunProgram(t, keygen, "-q", "-t", "ed25519", "-N", "", "-C", "op", "-f", key)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	akFile := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(akFile, append([]byte("role=operator "), pub...), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startDev(t, "--ssh-listen", "127.0.0.1:0", "--authorized-keys", akFile)
	m := regexp.MustCompile(`ssh -p (\d+) 127\.0\.0\.1`).FindStringSubmatch(devOut)
	if m == nil {
		t.Fatalf("dev did not print its SSH address:\n%s", devOut)
	}
	sshArgs := func(user string, args ...string) []string {
		return append([]string{"-p", m[1], "-i", key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-F", "/dev/null", "-l", user, "127.0.0.1"}, args...)
	}
	req, _ := http.NewRequest("PUT", addr+"/v1/policy", strings.NewReader("version: 1\nrules:\n  - name: no-markers\n    match: {command: 'touch\\s+\\S*marker'}\n    action: deny\n  - name: default\n    action: allow\n"))
	req.Header.Set("Authorization", "Bearer "+devAdminToken)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/policy: %v %v", err, resp)
	}
	resp.Body.Close()
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			testutil.NeedTool(t, shell)
			work := t.TempDir()
			out, err := exec.Command(sshBin, sshArgs("me", "new", "--shell", shell, "--cwd", work)...).Output()
			if err != nil {
				t.Fatalf("ssh new: %v", err)
			}
			addrS := strings.TrimSpace(string(out))
			testutil.Eventually(t, 10*time.Second, func() bool { // the node applies the policy within a second
				err := exec.Command(sshBin, sshArgs("me", "run", addrS, "--", "'touch probe-marker'")...).Run()
				ee, ok := err.(*exec.ExitError)
				return ok && ee.ExitCode() == 255
			}, "the node to deny by the policy")
			cmd := exec.Command(sshBin, append([]string{"-tt"}, sshArgs(strings.Replace(addrS, "/", "+", 1))...)...)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var buf bytes.Buffer
			w := writerTo(func(p []byte) { mu.Lock(); buf.Write(p); mu.Unlock() })
			cmd.Stdout, cmd.Stderr = w, w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
			text := func() string { mu.Lock(); defer mu.Unlock(); return buf.String() }
			since := func(off int, s string) func() bool {
				return func() bool { txt := text(); return len(txt) > off && strings.Contains(txt[off:], s) }
			}
			testutil.Eventually(t, 10*time.Second, func() bool { return len(text()) > 0 }, "the attach's screen")
			off := len(text())
			io.WriteString(in, "\x15ouch marker-sh\x01t\r") // the line editor makes it "touch marker-sh"
			testutil.Eventually(t, 10*time.Second, since(off, "fleetmux: denied by rule no-markers"), "the shell to say why in the attach:\n%s", text())
			off = len(text())
			io.WriteString(in, "touch marker-whole\r")
			testutil.Eventually(t, 10*time.Second, since(off, "no-markers"), "the attach to name the rule:\n%s", text())
			io.WriteString(in, "\x15touch ok\r")
			testutil.Eventually(t, 10*time.Second, func() bool { _, err := os.Stat(filepath.Join(work, "ok")); return err == nil }, "the allowed line to run:\n%s", text())
			for _, f := range []string{"marker-sh", "marker-whole", "probe-marker"} {
				if _, err := os.Stat(filepath.Join(work, f)); err == nil {
					t.Fatalf("%s exists: a denied line ran", f)
				}
			}
		})
	}
}

type writerTo func([]byte)

func (f writerTo) Write(p []byte) (int, error) { f(p); return len(p), nil }
