package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// agentPolicy holds the agent's commands that write files for a person; the rest
// (the operator's) runs.
const agentPolicy = `version: 1
rules:
  - name: agent-needs-a-human
    match: {principal: 'test:agent', command: 'touch|needs-ok'}
    action: approve
  - name: needs-ok
    match: {command: 'needs-ok'}
    action: approve
  - name: default
    action: allow
`

// injector waits for a file, then types "touch FILE" into its terminal with TIOCSTI,
// as a program in the session can (/proc/sys/dev/tty/legacy_tiocsti is 1, or the
// test runs as root).
const injector = `import fcntl, os, sys, termios, time
go, line = sys.argv[1], "tou" + "ch " + sys.argv[2]
end = time.time() + 30
while not os.path.exists(go) and time.time() < end:
    time.sleep(0.02)
time.sleep(0.2)
fd = os.open("/dev/tty", os.O_RDWR)
for c in (line + "\r").encode():
    fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
`

func canTIOCSTI(t *testing.T) {
	t.Helper()
	testutil.NeedTool(t, "python3")
	b, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti")
	if err == nil && strings.TrimSpace(string(b)) == "0" && os.Geteuid() != 0 {
		t.Skip("TIOCSTI is off on this kernel (dev.tty.legacy_tiocsti=0) and the test is not root")
	}
}

// TestInjectedLineIsNobodys performs writer confusion with TIOCSTI: a program the
// agent started (its own commands are held for a person) waits until an operator
// typed a line, then types "touch MARKER" into the terminal itself. The shell asks
// about that line; no writer's input formed it, so it is decided as an unknown
// writer and denied (rule writer-unknown), never as the operator's (who held the
// writer lease): on the old code it ran as the operator's, with nobody approving.
func TestInjectedLineIsNobodys(t *testing.T) {
	canTIOCSTI(t)
	src := &docSource{rev: 1, doc: []byte(agentPolicy)}
	f := newFixture(t, func(c *node.Config) { c.Policy = src; c.WriterLease = 50 * time.Millisecond })
	dir := t.TempDir()
	s := f.create(api.CreateRequest{Shell: "bash", Cwd: dir})
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	script := filepath.Join(dir, "inj.py")
	if err := os.WriteFile(script, []byte(injector), 0o600); err != nil {
		t.Fatal(err)
	}
	goFile, marker := filepath.Join(dir, "go"), filepath.Join(dir, "marker")
	var res api.BlockResult
	if err := f.callAs("agent", api.RoleOperator, "run", api.RunRequest{Session: s.ID, Command: "python3 " + script + " " + goFile + " " + marker + " &", TimeoutMS: 20000}, &res); err != nil {
		t.Fatalf("the agent's background program: %v", err)
	}
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	// The operator types a line of theirs (and holds the lease).
	if err := f.callAs("op2", api.RoleOperator, "input", api.InputRequest{Session: s.ID, Data: "echo > " + goFile + "\r"}, nil); err != nil {
		t.Fatalf("the operator's line: %v", err)
	}
	var b api.Block
	testutil.Eventually(t, 20*time.Second, func() bool {
		var bl api.BlockList
		if f.call("blocks", api.SessionRequest{Session: s.ID}, &bl) != nil {
			return false
		}
		for _, b = range bl.Blocks {
			if strings.HasPrefix(b.Command, "touch ") && b.State == api.BlockDone {
				return true
			}
		}
		return fileThere(marker)
	}, "the injected line to be decided")
	if fileThere(marker) {
		t.Fatal("the line a program injected ran as the operator's")
	}
	if !strings.Contains(b.ExitCodeNote, "writer-unknown") {
		t.Fatalf("the injected line's block %+v, want denied by writer-unknown", b)
	}
}

// TestPlanterMayNotApprove: a line typed in a session where another principal ran
// something is held; that principal (a program of theirs may have typed it) may not
// approve it, even as an admin; someone else may.
func TestPlanterMayNotApprove(t *testing.T) {
	src := &docSource{rev: 1, doc: []byte(agentPolicy)}
	f := newFixture(t, func(c *node.Config) { c.Policy = src; c.WriterLease = 50 * time.Millisecond })
	dir := t.TempDir()
	s := f.create(api.CreateRequest{Shell: "bash", Cwd: dir})
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	if err := f.callAs("agent", api.RoleAdmin, "run", api.RunRequest{Session: s.ID, Command: "sleep 0", TimeoutMS: 20000}, nil); err != nil {
		t.Fatal(err)
	}
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	marker := filepath.Join(dir, "ok")
	var err error
	testutil.Eventually(t, 10*time.Second, func() bool {
		err = f.callAs("op2", api.RoleOperator, "input", api.InputRequest{Session: s.ID, Data: "echo needs-ok > " + marker + "\r"}, nil)
		return err == nil
	}, "the operator's line (%v)", err)
	var pending api.Approval
	testutil.Eventually(t, 15*time.Second, func() bool {
		var list api.ApprovalList
		f.mustCall("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list)
		if len(list.Approvals) != 1 {
			return false
		}
		pending = list.Approvals[0]
		return true
	}, "the line to be held")
	if pending.Kind != api.ApprovalLine || pending.Principal != "test:op2" {
		t.Fatalf("held %+v, want op2's line", pending)
	}
	err = f.callAs("agent", api.RoleAdmin, "decide", api.DecideRequest{ID: pending.ID, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil)
	if code(err) != api.CodeForbidden || !strings.Contains(err.Error(), "ran something") {
		t.Fatalf("the agent approving a line in a session where it ran something: %v, want forbidden", err)
	}
	if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: pending.ID, DecideBody: api.DecideBody{Decision: api.DecisionApprove}}, nil); err != nil {
		t.Fatalf("another admin approving: %v", err)
	}
	testutil.Eventually(t, 15*time.Second, func() bool { return fileThere(marker) }, "the approved line to run")
}

// TestInjectedPieceIsNobodys performs writer confusion with TIOCSTI over a line
// being typed: an operator has half typed `echo later: touch MARKER` when a
// program the agent started wipes the shell's line (C-u) and types `touch MARKER`
// itself. The planted line is a piece of the operator's pending text, but the
// shell accepted it as a line: no writer's input formed it, so it is denied
// (writer-unknown). On the old code it was the operator's and ran unapproved.
func TestInjectedPieceIsNobodys(t *testing.T) {
	canTIOCSTI(t)
	src := &docSource{rev: 1, doc: []byte(agentPolicy)}
	f := newFixture(t, func(c *node.Config) { c.Policy = src; c.WriterLease = 50 * time.Millisecond })
	dir := t.TempDir()
	s := f.create(api.CreateRequest{Shell: "bash", Cwd: dir})
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	script := filepath.Join(dir, "inj.py")
	wipe := strings.Replace(injector, `for c in (line`, `for c in ("\x15" + line`, 1)
	if err := os.WriteFile(script, []byte(wipe), 0o600); err != nil {
		t.Fatal(err)
	}
	goFile, marker := filepath.Join(dir, "go"), filepath.Join(dir, "marker")
	if err := f.callAs("agent", api.RoleOperator, "run", api.RunRequest{Session: s.ID, Command: "python3 " + script + " " + goFile + " " + marker + " &", TimeoutMS: 20000}, nil); err != nil {
		t.Fatalf("the agent's background program: %v", err)
	}
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	// The operator runs a line and leaves the next one half typed.
	if err := f.callAs("op2", api.RoleOperator, "input", api.InputRequest{Session: s.ID, Data: "echo > " + goFile + "\recho later: touch " + marker}, nil); err != nil {
		t.Fatalf("the operator's input: %v", err)
	}
	var b api.Block
	testutil.Eventually(t, 20*time.Second, func() bool {
		var bl api.BlockList
		if f.call("blocks", api.SessionRequest{Session: s.ID}, &bl) != nil {
			return false
		}
		for _, b = range bl.Blocks {
			if strings.HasPrefix(b.Command, "touch ") && b.State == api.BlockDone {
				return true
			}
		}
		return fileThere(marker)
	}, "the injected line to be decided")
	if fileThere(marker) {
		t.Fatal("the line a program planted over the operator's half-typed one ran as the operator's")
	}
	if !strings.Contains(b.ExitCodeNote, "writer-unknown") {
		t.Fatalf("the injected line's block %+v, want denied by writer-unknown", b)
	}
}
