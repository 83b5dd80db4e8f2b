package node_test

import (
	"runtime/metrics"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// TestReclaimAfterSessions: a node with ReclaimAfter returns a burst's garbage to
// the OS (a forced GC) once sessions stopped starting and ending for that long.
func TestReclaimAfterSessions(t *testing.T) {
	forced := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	f := newFixture(t, func(c *node.Config) { c.ReclaimAfter = 20 * time.Millisecond })
	before := forced()
	s := f.create(api.CreateRequest{})
	testutil.Eventually(t, 10*time.Second, func() bool { return forced() > before }, "a forced GC after the session started")
	before = forced()
	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)
	testutil.Eventually(t, 10*time.Second, func() bool { return forced() > before }, "a forced GC after the session ended")
}
