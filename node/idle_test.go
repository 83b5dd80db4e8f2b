package node_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// TestIdleSessionGoroutines: idle sessions of a guarded node (a policy source, as in
// `fleetmux dev`) park at most 2 goroutines each in the agent: the read of the
// output and the guard channel's reader (with a local PTY one goroutine of the
// process watches every program's exit, exits.go; in a holder the exit comes with
// the stream's end). The publisher,
// recorder and event pump, the kernel state sampler and the guard's worker run
// while there is work and end once caught up: each session ran a command first, so
// all of them had work and must have ended. Before they were started on demand, an
// idle guarded session parked 9 (the node's three followers, their wrapper, the
// sampler, the guard's worker, and the three above).
func TestIdleSessionGoroutines(t *testing.T) {
	const n = 20
	for _, tc := range []struct {
		name       string
		holder     bool
		perSession int
	}{{"local", false, 2}, {"holder", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			mods := []func(*node.Config){func(c *node.Config) { c.Policy = &docSource{doc: []byte(markerPolicy), rev: 1} }}
			if tc.holder {
				client := startHolder(t)
				mods = append(mods, func(c *node.Config) { c.Holder = client() })
			}
			f := newFixture(t, mods...)
			// The agent's own: the node's and its sessions' (not the in-process
			// holder's, which is another process in production).
			ours := func() []string {
				return testutil.Goroutines("github.com/fleetmux/fleetmux/node.", "github.com/fleetmux/fleetmux/session.")
			}
			settle := func(want int) (int, []string) {
				deadline := time.Now().Add(15 * time.Second)
				for {
					gs := ours()
					if len(gs) <= want || time.Now().After(deadline) {
						return len(gs), gs
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			base := len(ours()) // the node's own
			ids := make([]string, n)
			ids = append(ids, "") // and a first one, which may start what the node starts once
			for i := range ids {
				ids[i] = f.create(api.CreateRequest{}).ID
			}
			for _, id := range ids {
				if r := f.run(id, "echo hi"); !strings.Contains(r.Text, "hi") {
					t.Fatalf("%s: %q", id, r.Text)
				}
			}
			for _, id := range ids {
				var wr api.WaitResult
				f.mustCall("wait", api.WaitRequest{Session: id, Until: string(api.UntilIdle), TimeoutMS: 10000}, &wr)
				if !wr.OK {
					t.Fatalf("%s not idle", id)
				}
			}
			const process = 1 // the exit watch of the process's local sessions
			got, gs := settle(base + process + len(ids)*tc.perSession)
			per := float64(got-base) / float64(len(ids))
			if got > base+process+len(ids)*tc.perSession {
				t.Fatalf("%d idle sessions park %d goroutines (%.1f each, want at most %d); by function:\n%s", len(ids), got-base, per, tc.perSession, byFunc(gs))
			}
			t.Logf("%d idle sessions park %d goroutines (%.2f each)", len(ids), got-base, per)
		})
	}
}

// byFunc counts goroutines by their top frame of ours.
func byFunc(stacks []string) string {
	count := map[string]int{}
	for _, g := range stacks {
		top := "?"
		for _, l := range strings.Split(g, "\n") {
			if strings.HasPrefix(l, "github.com/fleetmux/") {
				top = l
				if i := strings.LastIndexByte(top, '('); i > 0 {
					top = top[:i]
				}
				break
			}
		}
		count[top]++
	}
	var out []string
	for k, v := range count {
		out = append(out, fmt.Sprintf("%5d %s", v, k))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
