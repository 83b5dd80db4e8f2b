package session

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/sandbox"
)

func needSandbox(t *testing.T) {
	t.Helper()
	if c := sandbox.Probe(); c.Landlock < 4 || !c.NetNS || c.Cgroups == 0 {
		t.Skipf("needs root, Landlock ABI >= 4 and cgroups: %+v", c)
	}
}

// workonly: write only dir, network none, 64 pids, 256 MiB.
func workonly(dir string) *api.SandboxProfile {
	return &api.SandboxProfile{Name: "workonly", Files: api.SandboxFiles{Write: []string{dir}},
		Network: api.SandboxNetwork{Mode: api.NetworkNone}, Limits: api.SandboxLimits{MemoryBytes: 256 << 20, Pids: 64}}
}

func TestSandboxedShell(t *testing.T) {
	needSandbox(t)
	for _, inHolder := range []bool{false, true} {
		name := "local"
		if inHolder {
			name = "holder"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var home string
			s := startShell(t, "bash", func(c *Config) {
				home = c.Dir
				c.Sandbox = workonly(home)
				if inHolder {
					c.Holder = dialHolder(t, startHolder(t))
				}
			})
			if r := run(t, s, "touch /etc/fm-sandbox-x"); exitCode(r) != 1 || !strings.Contains(r.Text, "Permission denied") {
				t.Fatalf("touch /etc: exit %d %q", exitCode(r), r.Text)
			}
			if r := run(t, s, "touch ~/x && echo made"); exitCode(r) != 0 || !strings.Contains(r.Text, "made") {
				t.Fatalf("touch in the workdir: exit %d %q", exitCode(r), r.Text)
			}
			if _, err := os.Stat(home + "/x"); err != nil {
				t.Fatal(err)
			}
			if in := s.Info(); in.Sandbox == nil || in.Sandbox.Name != "workonly" {
				t.Fatalf("info: %+v", in.Sandbox)
			}
		})
	}
}

func TestSandboxForkBombSparesOthers(t *testing.T) {
	needSandbox(t)
	bomb := startShell(t, "bash", func(c *Config) { c.Sandbox = workonly(c.Dir) })
	other := startShell(t, "bash")
	run(t, other, "true")
	if _, err := bomb.Run(ctxT(t), `sh -c 'n=0; while [ $n -lt 300 ]; do sleep 2 & n=$((n+1)); done; wait'`, RunOptions{Timeout: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	out := func() string { b, _ := bomb.Read(0, 1<<20); return string(b) }
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out(), "fork") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out(), "fork") {
		t.Fatalf("the bomb did not hit the pids limit: %q", out())
	}
	// Another session answers a run in under 100 ms (the best of five, on a
	// machine shared with other work; none over 2 s).
	best := time.Hour
	for range 5 {
		start := time.Now()
		r := run(t, other, "echo alive")
		took := time.Since(start)
		if !strings.Contains(r.Text, "alive") || took > 2*time.Second {
			t.Fatalf("the other session: %v %q", took, r.Text)
		}
		best = min(best, took)
	}
	t.Logf("another session's run took %v (best of 5) during the bomb", best)
	if best > 100*time.Millisecond {
		t.Fatalf("the other session's best run took %v during the bomb", best)
	}
}

func TestSandboxFailsClosed(t *testing.T) {
	needSandbox(t)
	p := workonly(t.TempDir())
	p.Limits.Pids = 1 << 40 // the kernel refuses it: the shell never runs
	_, err := Start(Config{ID: "t1", Shell: "bash", Dir: t.TempDir(), RuntimeDir: t.TempDir(), Sandbox: p})
	if !errors.Is(err, ErrSandbox) {
		t.Fatalf("Start: %v", err)
	}
}

// TestSandboxedShellUnderUmask: a sandboxed shell (root without capabilities)
// starts and prompts under umask 0177, with which its integration directory
// was made 0600 and bash could not read its rc file (EACCES) and never
// prompted. holder.Listen used to set that umask for a moment, which made this
// flake in the package's full run.
func TestSandboxedShellUnderUmask(t *testing.T) {
	needSandbox(t)
	old := -1
	s := startShell(t, "bash", func(c *Config) {
		c.Sandbox = workonly(c.Dir)
		old = syscall.Umask(0o177) // after the test's own directories were made
		t.Cleanup(func() { syscall.Umask(old) })
	})
	syscall.Umask(old)
	if r := run(t, s, "echo in-$((1+1))"); !strings.Contains(r.Text, "in-2") {
		t.Fatalf("%q", r.Text)
	}
}
