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

// TestNobodyEndsAnothersLine (from the second review): a line is decided for the
// writer who holds the lease when the shell asks, so another writer's Enter on a
// line an MCP agent typed (approve rule on actor mcp:*) ran it as theirs, with
// nobody approving. Now input that would end a line another writer started is
// refused (busy, naming them); the writer may clear it first and type their own.
func TestNobodyEndsAnothersLine(t *testing.T) {
	src := &docSource{rev: 1, doc: []byte(mcpApprovePolicy)}
	f := newFixture(t, func(c *node.Config) { c.Policy = src; c.WriterLease = 50 * time.Millisecond })
	s := f.create(api.CreateRequest{Shell: "bash"})
	f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: "idle", TimeoutMS: 20000}, nil)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	if err := f.callAs("mcp:agent", api.RoleOperator, "input", api.InputRequest{Session: s.ID, Data: "touch " + marker}, nil); err != nil {
		t.Fatalf("input: %v", err)
	}
	// The agent's lease lapses (50 ms here); then a person presses Enter.
	var err error
	testutil.Eventually(t, 10*time.Second, func() bool {
		err = f.callAs("person", api.RoleOperator, "input", api.InputRequest{Session: s.ID, Data: "\r"}, nil)
		var ae *api.Error
		return errors.As(err, &ae) && ae.Code == api.CodeBusy && strings.Contains(ae.Message, "so far is") && strings.Contains(ae.Message, "mcp:agent")
	}, "Enter on the agent's line is refused naming the agent (last: %v)", err)
	// Clearing the line first and typing one's own is fine.
	own := filepath.Join(dir, "own")
	if err := f.callAs("person", api.RoleOperator, "input", api.InputRequest{Session: s.ID, Data: "\x15touch " + own + "\r"}, nil); err != nil {
		t.Fatalf("the person's own line: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { _, err := os.Stat(own); return err == nil }, "the person's own line runs")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the MCP agent's line ran without approval: decided for the writer who pressed Enter")
	}
}
