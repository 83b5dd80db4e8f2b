package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestOpenSSHApprovals: on `fleetmux dev`, a command an approve rule matches is
// held for an operator's key over OpenSSH, listed by `approvals` over SSH and by
// the CLI, refused to the operator's `approve`, and run once an admin's key
// approves it, with its real exit code.
func TestOpenSSHApprovals(t *testing.T) {
	sshBin := testutil.NeedTool(t, "ssh")
	keygen := testutil.NeedTool(t, "ssh-keygen")
	dir := t.TempDir()
	opKey, adminKey := filepath.Join(dir, "op"), filepath.Join(dir, "admin")
	var ak []byte
	for key, role := range map[string]string{opKey: "operator", adminKey: "admin"} {
		testutil.RunProgram(t, keygen, "-q", "-t", "ed25519", "-N", "", "-C", role, "-f", key)
		pub, err := os.ReadFile(key + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		ak = append(append(ak, "role="+role+" "...), pub...)
	}
	akFile := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(akFile, ak, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startDev(t, "--ssh-listen", "127.0.0.1:0", "--authorized-keys", akFile)
	m := regexp.MustCompile(`ssh -p (\d+) 127\.0\.0\.1`).FindStringSubmatch(devOut)
	if m == nil {
		t.Fatalf("dev did not print its SSH address:\n%s", devOut)
	}
	sshAs := func(key string, args ...string) (string, string, int) {
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
	req, _ := http.NewRequest("PUT", addr+"/v1/policy", strings.NewReader("version: 1\nrules:\n  - name: needs-a-human\n    match: {command: 'needs-ok'}\n    action: approve\n"))
	req.Header.Set("Authorization", "Bearer "+devAdminToken)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/policy: %v %v", err, resp)
	}
	resp.Body.Close()
	if out, errs, code := sshAs(opKey, "new"); code != 0 || out != "here/s1\n" {
		t.Fatalf("ssh new: %q %q %d", out, errs, code)
	}
	marker := filepath.Join(dir, "marker")
	var errs string
	var code int
	testutil.Eventually(t, 5*time.Second, func() bool { // the node applies the policy within a second
		_, errs, code = sshAs(opKey, "run", "here/s1", "--no-wait", "--", `'true # needs-ok'`)
		return code == 255 && strings.Contains(errs, "held")
	}, "the node to hold commands (exit %d, %q)", code, errs)
	if _, errs, code = sshAs(opKey, "run", "here/s1", "--no-wait", "--", `'echo once >> `+marker+`; (exit 7) # needs-ok'`); code != 255 || !strings.Contains(errs, "held") {
		t.Fatalf("ssh run: exit %d, %q: want held (255)", code, errs)
	}
	a := regexp.MustCompile(`approval (here/a\d+)`).FindStringSubmatch(errs)
	if a == nil {
		t.Fatalf("the held error names no approval: %q", errs)
	}
	out, _, code := sshAs(opKey, "approvals")
	if !strings.Contains(out, "echo once") {
		t.Fatalf("ssh approvals: %q", out)
	}
	pending := regexp.MustCompile(`(?m)^` + a[1] + ` +pending +here/s1 +ssh:SHA256:.* echo once`)
	if code != 0 || !pending.MatchString(out) || !strings.Contains(out, "needs-a-human") {
		t.Fatalf("ssh approvals: %d %q", code, out)
	}
	cliOut, _, err := runArgs(t, "approvals", "--addr", addr)
	if err != nil || !pending.MatchString(cliOut) {
		t.Fatalf("fleetmux approvals: %v %q", err, cliOut)
	}
	if _, errs, code := sshAs(opKey, "approve", a[1]); code == 0 || !strings.Contains(errs, "admin role") {
		t.Fatalf("ssh approve as operator: %q %d", errs, code)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the held command ran before an admin approved it")
	}
	if out, errs, code := sshAs(adminKey, "approve", a[1], "--reason", "fine"); code != 0 || !strings.Contains(out, a[1]+" approved") {
		t.Fatalf("ssh approve as admin: %q %q %d", out, errs, code)
	}
	// The exit code in the WHEN column (the command itself says "exit 7" too).
	ran := regexp.MustCompile(`block \d+ exit 7`)
	testutil.Eventually(t, 20*time.Second, func() bool {
		out, _, _ = sshAs(opKey, "approvals", "--state", "approved")
		return ran.MatchString(out)
	}, "the approved command's exit code in approvals: %q", out)
	if b, err := os.ReadFile(marker); err != nil || string(b) != "once\n" {
		t.Fatalf("marker %q, %v: want the command run once", b, err)
	}
}
