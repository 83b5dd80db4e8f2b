package node_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestGuardShellChecksTypedLines: a line the node's own check of typed text cannot
// see (the line editor rearranges it: C-a moves to the start of the line) is checked
// by the shell before it runs: the shell asks the node, which denies it by the
// policy, audits it as typed, and the block says so; run's lines are decided once.
func TestGuardShellChecksTypedLines(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			if _, err := exec.LookPath(shell); err != nil {
				t.Skipf("%s: %v", shell, err)
			}
			f, _ := guardFixture(t, markerPolicy, 4)
			_, audits := testutil.AuditSub(t, f.srv.ClientURL(), "n1")
			dir := t.TempDir()
			s := f.create(api.CreateRequest{Shell: shell, Cwd: dir})
			f.run(s.ID, "touch "+filepath.Join(dir, "before"))
			testutil.NextAudit(t, audits, "create")
			if r := testutil.NextAudit(t, audits, "run"); r.Decision != api.ActionAllow || r.PolicyVersion != 4 {
				t.Fatalf("run audit %+v", r)
			}
			marker := filepath.Join(dir, "marker")
			// Typed "ouch DIR/marker", C-a, "t", Enter: the shell runs "touch DIR/marker".
			f.mustCall("input", api.InputRequest{Session: s.ID, Data: "ouch " + marker + "\x01t\r"}, nil)
			var b api.Block
			testutil.Eventually(t, 15*time.Second, func() bool {
				var list api.BlockList
				if err := f.call("blocks", api.SessionRequest{Session: s.ID}, &list); err != nil || len(list.Blocks) < 2 {
					return false
				}
				b = list.Blocks[1]
				return b.State == api.BlockDone
			}, "the typed line's block to finish")
			if fileThere(marker) {
				t.Fatal("the marker exists: the denied line ran")
			}
			if b.ExitCode != nil || b.ExitCodeNote != api.NoteDenied+" no-markers" {
				t.Fatalf("the typed line's block: exit %v note %q, want none and %q", b.ExitCode, b.ExitCodeNote, api.NoteDenied+" no-markers")
			}
			var sc api.Screen
			f.mustCall("screen", api.SessionRequest{Session: s.ID}, &sc)
			if !strings.Contains(sc.Text, "fleetmux: denied by rule no-markers") {
				t.Fatalf("the screen does not say why:\n%s", sc.Text)
			}
			// The shell asks while the input request is still being answered: its
			// record and the input's may come in either order.
			if r := testutil.NextAudits(t, audits, "input", "typed")["typed"]; r.Decision != api.ActionDeny || r.Rule != "no-markers" || r.PolicyVersion != 4 || r.Result != api.CodeDenied || !strings.Contains(r.Detail, "touch "+marker) {
				t.Fatalf("typed audit %+v", r)
			}
			// Allowed lines still run, decided once (no "typed" record for run's line).
			f.run(s.ID, "touch "+filepath.Join(dir, "after"))
			if r := testutil.NextAudit(t, audits, "run"); r.Decision != api.ActionAllow {
				t.Fatalf("run audit %+v", r)
			}
			if !fileThere(filepath.Join(dir, "after")) {
				t.Fatal("the allowed run did not run")
			}
		})
	}
}

// TestGuardShellUnaccepted: the red-team's attack through the node: input that runs a
// command substitution without accepting the line (bash: Esc C-e, shell-expand-line;
// zsh: Tab) is decided by the policy before the command runs.
func TestGuardShellUnaccepted(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			if _, err := exec.LookPath(shell); err != nil {
				t.Skipf("%s: %v", shell, err)
			}
			f, _ := guardFixture(t, markerPolicy, 4)
			dir := t.TempDir()
			s := f.create(api.CreateRequest{Shell: shell, Cwd: dir})
			f.run(s.ID, "true")
			marker := filepath.Join(dir, "marker")
			keys := "$(touch " + marker + ")\x1b\x05"
			if shell == "zsh" {
				keys = "echo $(touch " + marker + ")\t"
			}
			f.mustCall("input", api.InputRequest{Session: s.ID, Data: keys}, nil)
			testutil.Eventually(t, 15*time.Second, func() bool {
				var sc api.Screen
				return f.call("screen", api.SessionRequest{Session: s.ID}, &sc) == nil &&
					strings.Contains(strings.Join(strings.Fields(sc.Text), ""), "fleetmux:deniedbyruleno-markers")
			}, "the shell to say the unaccepted command was denied")
			if fileThere(marker) {
				t.Fatal("the marker exists: an unaccepted, denied command ran")
			}
		})
	}
}
