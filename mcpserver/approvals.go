package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Approvals (DESIGN.md "Guardrails"): a command an approve rule holds is not run
// until a person decides. run_command answers held (not an error: nothing went
// wrong, the command waits) with the approval's address; wait_for with that
// approval waits for the decision and, once the node ran the approved command,
// returns its block like run_command does.

// Result states (Block.State) of held commands.
const (
	resultHeld   = "held"    // waits for a person's decision
	resultDenied = "denied"  // denied or expired undecided: it did not run
	resultNotRun = "not_run" // approved, but the node could not type it
)

// heldError reports whether err is a held reply, and returns it.
func heldError(err error) (*api.Error, bool) {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeHeld && ae.Approval != "" {
		return ae, true
	}
	return nil, false
}

// heldResult is run_command's result for a command the policy holds.
func heldResult(node, id, command string, ae *api.Error) (*mcp.CallToolResult, Block) {
	args := jsonArgs("node", node, "session", id, "approval", ae.Approval)
	text := fmt.Sprintf("[%s] held for approval %s · $ %s\n"+
		"Nothing ran yet: rule %q of the fleet's policy needs a person to approve this command. "+
		"Call wait_for %s to wait for the decision (it may take minutes: call it again when it times out). "+
		"Once approved, the node runs the command itself and wait_for returns its result with the exit code; "+
		"denied or undecided in time, it never runs. Do not send the command again.",
		addr(node, id), ae.Approval, api.OneLine(command, 120), ae.Rule, args)
	return textResult(text), Block{Node: node, Session: id, State: resultHeld, Command: command, Approval: ae.Approval, Rule: ae.Rule, ApprovalState: api.ApprovalPending}
}

// waitApproval is wait_for with an approval: it waits (up to the timeout) until
// the approval is done and reports what happened.
func (m *Server) waitApproval(ctx context.Context, in waitForIn, timeout int) (*mcp.CallToolResult, Block, error) {
	node, aid, err := api.ParseApprovalAddr(in.Approval)
	if err != nil {
		return nil, Block{}, toolErrf("bad approval %q: want NODE/ID as run_command gave it, e.g. web-1/a3", in.Approval)
	}
	if node != in.Node {
		return nil, Block{}, toolErrf("approval %s is on node %s, not %s: give the node and session run_command was called with", in.Approval, node, in.Node)
	}
	a, err := m.f.Approval(ctx, node, aid, timeout)
	if err != nil {
		return nil, Block{}, m.explain(err, in.Node, in.Session)
	}
	if a.Session != in.Session {
		return nil, Block{}, toolErrf("approval %s is for session %s, not %s", in.Approval, addr(a.Node, a.Session), addr(in.Node, in.Session))
	}
	ok := a.Done
	out := Block{Node: a.Node, Session: a.Session, Command: a.Command, Approval: a.Addr(), Rule: a.Rule, ApprovalState: a.State, OK: &ok}
	who := ""
	if a.DecidedBy != "" {
		who = " by " + a.DecidedBy
	}
	if a.Reason != "" {
		who += " (reason: " + api.OneLine(a.Reason, 200) + ")"
	}
	again := jsonArgs("node", a.Node, "session", a.Session, "approval", a.Addr())
	switch {
	case a.State == api.ApprovalPending:
		out.State = resultHeld
		return textResult(fmt.Sprintf("[%s] approval %s still pending (undecided by %s means denied) · $ %s\nNobody has decided yet; nothing ran. Call wait_for %s again to keep waiting.",
			addr(a.Node, a.Session), a.Addr(), a.ExpiresAt.Format(time.RFC3339), api.OneLine(a.Command, 120), again)), out, nil
	case a.State == api.ApprovalDenied || a.State == api.ApprovalExpired:
		out.State = resultDenied
		what := "denied" + who
		if a.State == api.ApprovalExpired {
			what = "not decided in time (" + a.Reason + "): denied"
		}
		return textResult(fmt.Sprintf("[%s] approval %s %s · $ %s\nThe command did not run and will not run.",
			addr(a.Node, a.Session), a.Addr(), what, api.OneLine(a.Command, 120))), out, nil
	case a.Error != "":
		out.State = resultNotRun
		return textResult(fmt.Sprintf("[%s] approval %s approved%s, but the node could not run it: %s · $ %s",
			addr(a.Node, a.Session), a.Addr(), who, a.Error, api.OneLine(a.Command, 120))), out, nil
	case a.Kind == api.ApprovalLine:
		out.State = api.BlockRunning
		return textResult(fmt.Sprintf("[%s] approval %s approved%s: the shell runs the line it held · $ %s\nCall wait_for %s for its result.",
			addr(a.Node, a.Session), a.Addr(), who, api.OneLine(a.Command, 120), jsonArgs("node", a.Node, "session", a.Session))), out, nil
	case a.Kind == api.ApprovalInput && a.Done:
		out.State = api.BlockDone
		return textResult(fmt.Sprintf("[%s] approval %s approved%s: the node typed the held input · $ %s\nCall read_screen or wait_for %s to see what the program did.",
			addr(a.Node, a.Session), a.Addr(), who, api.OneLine(a.Command, 120), jsonArgs("node", a.Node, "session", a.Session))), out, nil
	case a.Block == 0:
		out.State = api.BlockRunning
		return textResult(fmt.Sprintf("[%s] approval %s approved%s; the node is about to run it · $ %s\nCall wait_for %s again for its result.",
			addr(a.Node, a.Session), a.Addr(), who, api.OneLine(a.Command, 120), again)), out, nil
	}
	v := blockView{node: a.Node, id: a.Session, budget: m.budget(in.MaxOutputBytes)}
	br, err := m.f.Block(ctx, a.Node, a.Session, a.Block, api.BlockQuery{MaxBytes: v.budget})
	if err != nil {
		return nil, Block{}, m.explain(err, a.Node, a.Session)
	}
	v.br, v.hasBlock, v.now = br, true, time.Now()
	res := v.out()
	res.Approval, res.Rule, res.ApprovalState, res.OK = out.Approval, out.Rule, out.ApprovalState, out.OK
	text := fmt.Sprintf("approval %s approved%s; the node ran it:\n", a.Addr(), who) + v.text()
	if !ok {
		text += "\n(still running: call wait_for " + again + " again)"
	}
	return textResult(strings.TrimRight(text, "\n")), res, nil
}
