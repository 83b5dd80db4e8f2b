package guard

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// TestLeaseHeld: who finds a session's writer lease held by another, by how it is
// held, and what busy says.
func TestLeaseHeld(t *testing.T) {
	now := time.Unix(1000, 0)
	alice := Writer{Principal: "ssh:SHA256:alice", Actor: "ssh:SHA256:alice", Role: api.RoleOperator}
	agent := Writer{Principal: "token:agent", Actor: "mcp:\x1b[2Jclaude", Role: api.RoleOperator}
	agentB := Writer{Principal: "token:agent", Actor: "mcp:other", Role: api.RoleOperator}
	done := map[int]bool{3: true}
	blockDone := func(n int) bool { return done[n] }
	for _, tt := range []struct {
		name string
		l    *lease
		w    Writer
		held bool
		busy string // in busy's message when held
	}{
		{"never held", &lease{}, agent, false, ""},
		{"own typing", &lease{held: true, holder: alice, kind: leaseAttach, until: now.Add(time.Second)}, alice, false, ""},
		{"a person typing", &lease{held: true, holder: alice, kind: leaseAttach, until: now.Add(time.Second)}, agent, true, "ssh:SHA256:alice, who is typing in an attach"},
		{"a person who stopped", &lease{held: true, holder: alice, kind: leaseAttach, until: now}, agent, false, ""},
		{"typing by API", &lease{held: true, holder: agent, kind: leaseTyping, until: now.Add(time.Second)}, alice, true, `token:agent (mcp:\x1b[2Jclaude), who is typing into it`},
		{"another actor of one token", &lease{held: true, holder: agent, kind: leaseTyping, until: now.Add(time.Second)}, agentB, true, "token:agent"},
		{"a run in flight", &lease{held: true, holder: agent, kind: leaseRun, runs: 1}, alice, true, "is running a command; retry when its block ends"},
		{"a run's block still running", &lease{held: true, holder: agent, kind: leaseRun, block: 4}, alice, true, "(block 4)"},
		{"a run's block done", &lease{held: true, holder: agent, kind: leaseRun, block: 3}, alice, false, ""},
		{"a run that typed nothing", &lease{held: true, holder: agent, kind: leaseRun}, alice, false, ""},
		{"taken over", &lease{held: true, holder: alice, kind: leaseTakeOver, until: now.Add(time.Second)}, agent, true, "took it over"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.l.ttl = api.WriterLease
			if got := tt.l.heldByOtherLocked(tt.w, now, blockDone); got != tt.held {
				t.Fatalf("held = %v, want %v", got, tt.held)
			}
			if !tt.held {
				return
			}
			msg := tt.l.busyLocked("n1/s1").Message
			if !strings.Contains(msg, tt.busy) || !strings.Contains(msg, "take it over") || strings.ContainsRune(msg, 0x1b) {
				t.Fatalf("busy = %q, want %q in it, a way out and no control character", msg, tt.busy)
			}
		})
	}
}

// TestMayWrite: viewers (and callers without a role) never hold a lease.
func TestMayWrite(t *testing.T) {
	for role, ok := range map[string]bool{api.RoleViewer: false, "": false, "root": false, api.RoleOperator: true, api.RoleAdmin: true} {
		if err := mayWrite(Writer{Principal: "p", Role: role}); (err == nil) != ok {
			t.Errorf("mayWrite(%q) = %v, want ok %v", role, err, ok)
		}
	}
}
