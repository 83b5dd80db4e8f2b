package node_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestExecSandboxed: an exec runs under the sandbox profile the policy chooses
// for its principal, as that principal's sessions do: a write outside the
// profile fails, one inside works, and another principal is not confined.
func TestExecSandboxed(t *testing.T) {
	if c := sandbox.Probe(); c.Landlock < 4 || !c.NetNS || c.Cgroups == 0 {
		t.Skipf("needs root, Landlock ABI >= 4 and cgroups: %+v", c)
	}
	work, outside := t.TempDir(), t.TempDir()
	f, _ := guardFixture(t, fmt.Sprintf(`version: 1
rules:
  - name: default
    action: allow
sandboxes:
  profiles:
    workonly:
      files: {write: [%s]}
      network: none
      limits: {pids: 64}
  rules:
    - match: {principal: 'test:boxed'}
      profile: workonly
  default: none
`, work), 3)
	exec := func(actor, cmd string) api.ExecResult {
		t.Helper()
		var res api.ExecResult
		if err := f.callAs(actor, api.RoleOperator, api.VerbExec, api.ExecRequest{Command: cmd, Cwd: work}, &res); err != nil {
			t.Fatalf("exec %q as %s: %v", cmd, actor, err)
		}
		return res
	}
	if r := exec("boxed", "touch "+outside+"/x"); r.ExitCode == nil || *r.ExitCode == 0 || !strings.Contains(r.Stderr, "Permission denied") {
		t.Fatalf("a boxed exec wrote outside its profile: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("the write outside happened")
	}
	if r := exec("boxed", "touch "+work+"/x"); r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("write inside the profile: %+v", r)
	}
	if r := exec("free", "touch "+outside+"/y"); r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("an unconfined principal's exec: %+v", r)
	}
}

// TestExecKeptOutOfDataDir performs the attack of an exec reading the node's
// credentials: it is kept out as a session is. On the code without it the exec
// read them.
func TestExecKeptOutOfDataDir(t *testing.T) {
	if sandbox.Probe().Landlock < 1 || os.Geteuid() != 0 {
		t.Skip("needs Landlock and root")
	}
	f := newFixture(t)
	creds := filepath.Join(f.data, "creds")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "node.creds"), []byte("SECRET-NKEY-SEED"), 0o600); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	var r api.ExecResult
	f.mustCall(api.VerbExec, api.ExecRequest{Command: "cat " + filepath.Join(creds, "node.creds") + "; echo x > " + work + "/ok && cat " + work + "/ok", Cwd: work}, &r)
	if strings.Contains(r.Stdout, "SECRET") || r.Stderr == "" || !strings.Contains(r.Stdout, "x") {
		t.Fatalf("the exec read the data dir, or could not write its own: %+v", r)
	}
}

// TestExecRedactedAtAnyOffset performs a viewer's attack on an exec's output: a
// secret the policy redacts, read back in windows of one byte (exec_output
// from/max) or cut by a small budget (exec_get max_output_bytes), so that no
// window holds enough of it for the pattern to match; and the secret as it
// stands in the exec's argv. On the code that redacted each read on its own,
// the windows put the secret back together and the argv showed it.
func TestExecRedactedAtAnyOffset(t *testing.T) {
	const secret = "AKIAABCDEFGHIJKLMNOP"
	f, _ := guardFixture(t, `version: 1
rules:
  - name: default
    action: allow
redact:
  - {name: aws-key, pattern: 'AKIA[0-9A-Z]{16}'}
`, 3)
	var r api.ExecResult
	f.mustCall(api.VerbExec, api.ExecRequest{Command: "printf 'AKIA%s\\n' ABCDEFGHIJKLMNOP; printf 'AKIA%s\\n' ABCDEFGHIJKLMNOP >&2 # " + secret}, &r)
	if r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("exec: %+v", r)
	}
	if b, _ := json.Marshal(r); strings.Contains(string(b), secret) {
		t.Errorf("the exec's result holds the secret: %s", b)
	}
	for _, stream := range []string{api.StreamStdout, api.StreamStderr} {
		var pieces strings.Builder
		for from := int64(0); ; {
			var out api.ExecOutput
			f.mustCall(api.VerbExecOutput, api.ExecOutputRequest{ExecID: r.ExecID, Stream: stream, From: from, Max: 1}, &out)
			if out.Next <= from {
				break
			}
			pieces.WriteString(out.Data)
			from = out.Next
		}
		if strings.Contains(pieces.String(), "ABCDEFGHIJKLMNOP") {
			t.Errorf("%s read a byte at a time puts the secret together: %q", stream, pieces.String())
		}
	}
	for budget := 1; budget <= 24; budget++ {
		var got api.ExecResult
		f.mustCall(api.VerbExecGet, api.ExecTarget{ExecID: r.ExecID, MaxOutputBytes: budget}, &got)
		if strings.Contains(got.Stdout, "EFGHIJKLMNOP") || strings.Contains(got.Stdout, "AKIAABCD") {
			t.Errorf("cut to %d bytes, stdout shows part of the secret: %q", budget, got.Stdout)
		}
	}
}

// spareWrappers are the pids of this process's children that are sandbox
// wrappers waiting for their program (`BINARY sandbox-exec 5 --`).
func spareWrappers(t *testing.T) []int {
	t.Helper()
	var out []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !strings.HasSuffix(string(cmd), "\x00"+sandbox.Verb+"\x005\x00--\x00") {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if i := strings.LastIndexByte(string(st), ')'); err == nil && i > 0 {
			if f := strings.Fields(string(st)[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// TestExecSpareWrapper: after a sandboxed exec the node keeps one wrapper started
// ahead; the next exec runs in it with its own argv, cwd and environment, and is
// kept out of the data dir as a cold one is (the attack of reading the node's
// credentials fails through the spare too); the node's Close ends the spare.
func TestExecSpareWrapper(t *testing.T) {
	if sandbox.Probe().Landlock < 1 || os.Geteuid() != 0 {
		t.Skip("needs Landlock and root")
	}
	f := newFixture(t)
	creds := filepath.Join(f.data, "creds")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "node.creds"), []byte("SECRET-NKEY-SEED"), 0o600); err != nil {
		t.Fatal(err)
	}
	var r api.ExecResult
	f.mustCall(api.VerbExec, api.ExecRequest{Argv: []string{"true"}}, &r)
	var spare []int
	testutil.Eventually(t, 20*time.Second, func() bool { spare = spareWrappers(t); return len(spare) == 1 }, "a spare wrapper")
	work := t.TempDir()
	f.mustCall(api.VerbExec, api.ExecRequest{Command: `pwd; echo "v=$FM_SPARE_TEST"; cat ` + filepath.Join(creds, "node.creds") + `; exit 7`, Cwd: work,
		Env: map[string]string{"FM_SPARE_TEST": "through-the-spare"}}, &r)
	if r.ExitCode == nil || *r.ExitCode != 7 || r.Stdout != work+"\nv=through-the-spare\n" || r.Stderr == "" {
		t.Fatalf("exec through the spare: %+v", r)
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		now := spareWrappers(t)
		return len(now) == 1 && now[0] != spare[0]
	}, "the spare used and a new one waiting")
	if err := f.node.Close(); err != nil {
		t.Fatal(err)
	}
	if left := spareWrappers(t); len(left) > 0 {
		t.Fatalf("spare wrappers %v left after Close", left)
	}
}
