package sshd

import (
	"context"
	"fmt"
	"io"

	"github.com/fleetmux/fleetmux/api"
)

// Notices of held commands (DESIGN.md "Guardrails"): people attached to a session
// are told when one of its commands is held for approval and when it is decided.

// approvalWatcher is what the front door needs of the fleet for the notices (the
// controller has it). A Fleet without it shows none.
type approvalWatcher interface {
	// WatchApprovals calls fn with every approval event of node until stop is
	// called; fn must not block.
	WatchApprovals(node string, fn func(api.ApprovalEvent)) (stop func() error, err error)
}

// maxNotices bounds the notices waiting to be written to one attached terminal
// (more are dropped: `approvals` lists them all).
const maxNotices = 16

// watchNotices writes a notice to w for each approval event of node/id until ctx
// ends; the returned func waits until it stopped writing. It is a no-op when the
// fleet cannot watch approvals.
func (sc *sshSession) watchNotices(ctx context.Context, node, id string, w io.Writer) (wait func()) {
	aw, ok := sc.s.fleet.(approvalWatcher)
	if !ok {
		return func() {}
	}
	notices := make(chan string, maxNotices)
	stop, err := aw.WatchApprovals(node, func(ev api.ApprovalEvent) {
		if ev.Approval.Session != id {
			return
		}
		if n := notice(ev); n != "" {
			select {
			case notices <- n:
			default: // the terminal is slow: drop it
			}
		}
	})
	if err != nil {
		sc.s.log.Warn("approval notices unavailable", "session", node+"/"+id, "err", err)
		return func() {}
	}
	done := make(chan struct{})
	go func() { // writes the notices; ends with ctx (the attach)
		defer close(done)
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case n := <-notices:
				if _, err := io.WriteString(w, n); err != nil {
					return
				}
			}
		}
	}()
	return func() { <-done }
}

// notice is the line an attached person sees for an approval event ("" for none).
// What a node sent is made printable: it never moves the cursor or sets colours.
func notice(ev api.ApprovalEvent) string {
	a := ev.Approval
	addr := trunc(a.Addr(), 80)
	cmd := trunc(a.Command, 120)
	if a.Kind == api.ApprovalAgentTool {
		cmd = trunc(a.Agent+" "+a.Tool+": "+a.Command, 120) // an agent waits to use a tool
	}
	switch ev.Type {
	case api.ApprovalEventHeld:
		who := a.Principal
		if who == "" {
			who = a.Actor
		}
		return fmt.Sprintf("\r\n[fleetmux: %s is held for approval by rule %s: %s (asked by %s). Decide with `approve %s` or `deny %s` (admin).]\r\n",
			addr, trunc(a.Rule, 64), cmd, trunc(who, 80), addr, addr)
	case api.ApprovalEventApproved:
		return fmt.Sprintf("\r\n[fleetmux: %s approved by %s%s: %s]\r\n", addr, trunc(a.DecidedBy, 80), reasonText(a.Reason), cmd)
	case api.ApprovalEventDenied:
		return fmt.Sprintf("\r\n[fleetmux: %s denied by %s%s: %s does not run]\r\n", addr, trunc(a.DecidedBy, 80), reasonText(a.Reason), cmd)
	case api.ApprovalEventExpired:
		return fmt.Sprintf("\r\n[fleetmux: %s expired undecided (%s): %s does not run]\r\n", addr, trunc(a.Reason, 80), cmd)
	}
	return ""
}

func reasonText(r string) string {
	if r == "" {
		return ""
	}
	return " (" + trunc(r, 200) + ")"
}
