package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// TestDeniedNoteAcrossRestart: a line typed at the prompt that a person denied (an
// approval) ends in a block noted "denied by policy rule …"; after an agent restart
// the rebuilt block says so still (the recording's index keeps the note): the
// review found it rebuilt as "the marks were inconsistent".
func TestDeniedNoteAcrossRestart(t *testing.T) {
	client := startHolder(t)
	src := &docSource{rev: 1, doc: []byte(approvalPolicy)}
	f := newFixture(t, func(c *node.Config) { c.Holder = client(); c.Policy = src })
	s := f.create(api.CreateRequest{Shell: "bash", Cwd: t.TempDir()})
	f.run(s.ID, "true")
	f.mustCall("input", api.InputRequest{Session: s.ID, Data: "echo held\r"}, nil)
	var list api.ApprovalList
	testutil.Eventually(t, 20*time.Second, func() bool {
		return f.call("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list) == nil && len(list.Approvals) == 1
	}, "held")
	if err := f.callAs("boss", api.RoleAdmin, "decide", api.DecideRequest{ID: list.Approvals[0].ID, DecideBody: api.DecideBody{Decision: api.DecisionDeny}}, nil); err != nil {
		t.Fatal(err)
	}
	var blk api.BlockResult
	testutil.Eventually(t, 20*time.Second, func() bool {
		return f.call("block", api.BlockRequest{Session: s.ID, N: 2}, &blk) == nil && blk.Block.State == "done"
	}, "block 2 done")
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	f.restart(client(), 0, 1, func(c *node.Config) { c.Policy = src })
	var after api.BlockResult
	testutil.Eventually(t, 20*time.Second, func() bool {
		return f.call("block", api.BlockRequest{Session: s.ID, N: 2}, &after) == nil
	}, "block 2 after restart")
	if !strings.HasPrefix(blk.Block.ExitCodeNote, api.NoteDenied) {
		t.Fatalf("the denied block's note before the restart: %q", blk.Block.ExitCodeNote)
	}
	if after.Block.ExitCodeNote != blk.Block.ExitCodeNote || (after.Block.ExitCode == nil) != (blk.Block.ExitCode == nil) {
		t.Fatalf("denied block changed across the restart: note %q -> %q, exit %v -> %v", blk.Block.ExitCodeNote, after.Block.ExitCodeNote, blk.Block.ExitCode, after.Block.ExitCode)
	}
}
