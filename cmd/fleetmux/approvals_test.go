package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func TestApprovalVerbUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"approvals", "x"}, `approvals: takes no arguments, got "x"`},
		{[]string{"approvals", "--state", "maybe"}, `approvals: --state "maybe": want pending, approved, denied, expired or all`},
		{[]string{"approvals", "--node", "a.b"}, `approvals: --node: name "a.b"`},
		{[]string{"approve"}, "approve: missing approval address NODE/ID"},
		{[]string{"approve", "web-1"}, `approve: approval "web-1": want NODE/ID`},
		{[]string{"deny", "web-1/s3"}, `deny: approval id "s3" (want a<N>`},
		{[]string{"deny", "web-1/a1", "x"}, `deny: unexpected argument "x"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := append(slicesClone(tt.args), "--addr", unreachable)
			_, _, err := runArgs(t, args...)
			if exitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("fleetmux %s: exit %d, %v\nwant exit 2 and an error containing %q", strings.Join(args, " "), exitCode(err), err, tt.want)
			}
		})
	}
}

func TestPrintApprovals(t *testing.T) {
	now := time.Now()
	decided := now.Add(-time.Minute)
	var b bytes.Buffer
	printApprovals(&b, api.ApprovalList{Approvals: []api.Approval{
		{ID: "a1", Node: "web-1", Session: "s3", Command: "reboot", Principal: "token:agent", Rule: "prod", State: api.ApprovalPending, ExpiresAt: now.Add(90*time.Second + 400*time.Millisecond)},
		{ID: "a2", Node: "web-1", Session: "s3", Command: "make\tdeploy", Principal: "token:agent", Rule: "prod", State: api.ApprovalApproved,
			DecidedAt: &decided, DecidedBy: "ssh:SHA256:x", Block: 4, ExitCode: intp(7)},
		{ID: "a3", Node: "db", Session: "s1", Command: "drop", Actor: "mcp:x", Rule: "db", State: api.ApprovalExpired, Reason: "nobody decided"},
	}, Unavailable: []string{"web-2"}})
	want := "" +
		"APPROVAL  STATE     SESSION   ASKED BY     RULE  WHEN                             COMMAND\n" +
		"web-1/a1  pending   web-1/s3  token:agent  prod  expires in 1m30s                 reboot\n" +
		"web-1/a2  approved  web-1/s3  token:agent  prod  block 4 exit 7, by ssh:SHA256:x  make deploy\n" +
		"db/a3     expired   db/s1     mcp:x        db    nobody decided                   drop\n" +
		"(nodes that did not answer: [web-2])\n"
	if b.String() != want {
		t.Errorf("approvals:\n%s\nwant:\n%s", b.String(), want)
	}
}
