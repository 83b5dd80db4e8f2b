package sshd

import (
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

func TestNotice(t *testing.T) {
	a := api.Approval{ID: "a3", Node: "n1", Session: "s1", Command: "rm -rf /tmp/x\x1b[2J\r\nevil", Rule: "prod", Principal: "token:agent"}
	held := notice(api.ApprovalEvent{Type: api.ApprovalEventHeld, Approval: a})
	if !strings.Contains(held, "n1/a3 is held for approval by rule prod") || !strings.Contains(held, "`approve n1/a3`") || !strings.Contains(held, "token:agent") {
		t.Errorf("held notice %q", held)
	}
	a.DecidedBy, a.Reason = "ssh:SHA256:x", "ok\x1b]0;t\x07"
	for typ, want := range map[string]string{
		api.ApprovalEventApproved: "n1/a3 approved by ssh:SHA256:x",
		api.ApprovalEventDenied:   "n1/a3 denied by ssh:SHA256:x",
		api.ApprovalEventExpired:  "n1/a3 expired undecided",
	} {
		n := notice(api.ApprovalEvent{Type: typ, Approval: a})
		if !strings.Contains(n, want) {
			t.Errorf("%s notice %q, want %q", typ, n, want)
		}
	}
	for _, typ := range []string{api.ApprovalEventHeld, api.ApprovalEventApproved, api.ApprovalEventDenied, api.ApprovalEventExpired} {
		n := strings.TrimSuffix(strings.TrimPrefix(notice(api.ApprovalEvent{Type: typ, Approval: a}), "\r\n"), "\r\n")
		if strings.ContainsAny(n, "\x1b\r\n\x07") {
			t.Errorf("%s notice carries control characters: %q", typ, n)
		}
	}
	tool := api.Approval{ID: "a4", Node: "n1", Session: "s2", Kind: api.ApprovalAgentTool, Agent: "claude", Tool: "Bash\x1b[2J", Command: "touch MARKER", Rule: "ask"}
	if n := notice(api.ApprovalEvent{Type: api.ApprovalEventHeld, Approval: tool}); !strings.Contains(n, ": claude Bash") || !strings.Contains(n, ": touch MARKER (asked") || strings.Contains(n, "\x1b") {
		t.Errorf("an agent's tool held: notice %q", n)
	}
	if n := notice(api.ApprovalEvent{Type: api.ApprovalEventDone, Approval: a}); n != "" {
		t.Errorf("done notice %q, want none", n)
	}
}
