package mcpserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// TestHeldCommand: run_command on a command the policy holds says held with the
// approval (not a tool error), and wait_for with the approval reports each outcome.
func TestHeldCommand(t *testing.T) {
	held := &api.Error{Code: api.CodeHeld, Rule: "prod", Approval: "n1/a3", Message: "held"}
	f := &fake{runErr: held}
	c := serve(t, f, Options{})
	var b Block
	text, isErr := c.call("run_command", map[string]any{"node": "n1", "session": "s1", "command": "reboot"}, &b)
	if isErr || b.State != resultHeld || b.Approval != "n1/a3" || b.Rule != "prod" || b.ApprovalState != api.ApprovalPending {
		t.Fatalf("run_command: error %v, %+v\n%s", isErr, b, text)
	}
	if !strings.Contains(text, `Call wait_for {"node":"n1","session":"s1","approval":"n1/a3"}`) || !strings.Contains(text, "Nothing ran yet") {
		t.Errorf("run_command's text does not tell the model what to do:\n%s", text)
	}

	seven := 7
	now := time.Now()
	base := api.Approval{ID: "a3", Node: "n1", Session: "s1", Command: "reboot", Rule: "prod", ExpiresAt: now.Add(time.Minute)}
	f.run = api.BlockResult{Block: api.Block{N: 4, Command: "reboot", State: api.BlockDone, ExitCode: &seven, StartedAt: now, FinishedAt: &now},
		Text: "bye\n", Session: api.Session{Node: "n1", ID: "s1", State: api.StateIdle, Blocks: 4}}
	args := map[string]any{"node": "n1", "session": "s1", "approval": "n1/a3", "timeout_ms": 1000}
	for _, tt := range []struct {
		name  string
		a     func(a *api.Approval)
		state string
		ok    bool
		text  string
	}{
		{"pending", func(a *api.Approval) { a.State = api.ApprovalPending }, resultHeld, false, "still pending"},
		{"denied", func(a *api.Approval) {
			a.State, a.DecidedBy, a.Reason, a.Done = api.ApprovalDenied, "token:ops", "not today", true
		}, resultDenied, true, "denied by token:ops (reason: not today)"},
		{"expired", func(a *api.Approval) {
			a.State, a.Reason, a.Done = api.ApprovalExpired, "nobody decided", true
		}, resultDenied, true, "not decided in time"},
		{"approved and ran", func(a *api.Approval) {
			a.State, a.DecidedBy, a.Block, a.ExitCode, a.Done = api.ApprovalApproved, "token:ops", 4, &seven, true
		}, api.BlockDone, true, "[n1/s1 #4] exit 7"},
		{"approved line", func(a *api.Approval) {
			a.State, a.DecidedBy, a.Kind, a.Done = api.ApprovalApproved, "token:ops", api.ApprovalLine, true
		}, api.BlockRunning, true, "the shell runs the line it held"},
		{"approved, not run", func(a *api.Approval) {
			a.State, a.DecidedBy, a.Error, a.Done = api.ApprovalApproved, "token:ops", "session closed", true
		}, resultNotRun, true, "could not run it: session closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.appr = base
			tt.a(&f.appr)
			var b Block
			text, isErr := c.call("wait_for", args, &b)
			if isErr || b.State != tt.state || b.OK == nil || *b.OK != tt.ok || b.Approval != "n1/a3" || !strings.Contains(text, tt.text) {
				t.Fatalf("wait_for: error %v, %+v\n%s\nwant state %s ok %v and %q", isErr, b, text, tt.state, tt.ok, tt.text)
			}
			if tt.state == api.BlockDone && (b.ExitCode == nil || *b.ExitCode != 7 || b.N != 4) {
				t.Errorf("the run's block: %+v", b)
			}
		})
	}
	// An approval of another session or node is a clear tool error.
	f.appr = base
	if text, isErr := c.call("wait_for", map[string]any{"node": "n1", "session": "s2", "approval": "n1/a3"}, nil); !isErr || !strings.Contains(text, "is for session n1/s1") {
		t.Errorf("wait_for with another session's approval: %v %s", isErr, text)
	}
	if text, isErr := c.call("wait_for", map[string]any{"node": "n1", "session": "s1", "approval": "a3"}, nil); !isErr || !strings.Contains(text, "bad approval") {
		t.Errorf("wait_for with a bad approval: %v %s", isErr, text)
	}
}

func TestFanoutHeld(t *testing.T) {
	f := &fanoutFake{fo: api.Fanout{Failed: 1, Results: []api.FanoutResult{
		{Node: "n1", Session: "s9", Error: &api.Error{Code: api.CodeHeld, Rule: "prod", Approval: "n1/a1", Message: "held"}},
	}}}
	c := serve(t, f, Options{})
	var out Fanout
	text, isErr := c.call("fanout_run", map[string]any{"all": true, "command": "reboot"}, &out)
	if isErr || len(out.Results) != 1 || out.Results[0].Result != api.CodeHeld || out.Results[0].Approval != "n1/a1" {
		t.Fatalf("fanout_run: %v %+v\n%s", isErr, out, text)
	}
	if !strings.Contains(text, `held for approval n1/a1 by rule "prod"`) || !strings.Contains(text, `"approval":"n1/a1"`) {
		t.Errorf("fanout_run's text:\n%s", text)
	}
}

// fanoutFake is a fake whose Fanout replies fo.
type fanoutFake struct {
	fake
	fo api.Fanout
}

func (f *fanoutFake) Fanout(ctx context.Context, req api.FanoutRequest) (api.Fanout, error) {
	if err := f.called(ctx, "Fanout"); err != nil {
		return api.Fanout{}, err
	}
	return f.fo, nil
}
