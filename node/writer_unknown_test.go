package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// mcpApprovePolicy holds every line of an MCP actor for a person; the rest runs.
const mcpApprovePolicy = `version: 1
rules:
  - name: mcp-needs-a-human
    match: {actor: 'mcp:*'}
    action: approve
    approve_within: 10m
  - name: default
    action: allow
`

// TestHeldLineAcrossRestart: a line an MCP agent typed at the prompt is held for a
// person (an approve rule on actor 'mcp:*'); the agent restarts. The shell asks the
// next agent again, which does not know who typed the line: it is denied (rule
// writer-unknown), never run for "no writer" (the approve rule would not match it
// and the default would allow it: the review's bypass), and typed again it is held
// again. A policy-free node decides nothing, so it is not concerned.
func TestHeldLineAcrossRestart(t *testing.T) {
	client := startHolder(t)
	src := &docSource{rev: 1, doc: []byte(mcpApprovePolicy)}
	f := newFixture(t, func(c *node.Config) { c.Holder = client(); c.Policy = src })
	s := f.create(api.CreateRequest{Shell: "bash"})
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	marker := filepath.Join(t.TempDir(), "ran")
	pending := func() int {
		var list api.ApprovalList
		if f.call("approvals", api.ApprovalsRequest{State: api.ApprovalPending}, &list) != nil {
			return -1
		}
		return len(list.Approvals)
	}
	typeIt := func() {
		err := f.callAs("mcp:agent", api.RoleOperator, "input", api.InputRequest{Session: s.ID, Data: "touch " + marker + "\r"}, nil)
		var ae *api.Error
		if err != nil && !errors.As(err, &ae) {
			t.Fatalf("input: %v", err)
		}
	}
	typeIt()
	testutil.Eventually(t, 20*time.Second, func() bool { return pending() == 1 }, "the typed line is held for approval")
	f.restart(client(), 0, 1, func(c *node.Config) { c.Policy = src })
	testutil.Eventually(t, 20*time.Second, func() bool {
		var bl api.BlockList
		if f.call("blocks", api.SessionRequest{Session: s.ID}, &bl) != nil || len(bl.Blocks) == 0 {
			return false
		}
		b := bl.Blocks[len(bl.Blocks)-1]
		return b.State == "done" && strings.Contains(b.ExitCodeNote, "writer-unknown")
	}, "the line asked again is denied for an unknown writer")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the held line ran after the agent restart without anyone approving it")
	}
	if n := pending(); n != 0 {
		t.Fatalf("%d approvals pending on the new agent, want 0", n)
	}
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	typeIt()
	testutil.Eventually(t, 20*time.Second, func() bool { return pending() == 1 }, "typed again, the line is held again")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the line typed again ran without approval")
	}
}
