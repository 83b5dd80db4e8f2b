package node_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/node"
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
// credentials with HideDataDir: it is kept out as a session is. On the code
// without it the exec read them.
func TestExecKeptOutOfDataDir(t *testing.T) {
	if sandbox.Probe().Landlock < 1 {
		t.Skip("no Landlock")
	}
	f := newFixture(t, func(c *node.Config) { c.HideDataDir = true })
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
	if strings.Contains(r.Stdout, "SECRET") || !strings.Contains(r.Stderr, "Permission denied") || !strings.Contains(r.Stdout, "x") {
		t.Fatalf("the exec read the data dir, or could not write its own: %+v", r)
	}
}
