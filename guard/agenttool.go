package guard

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// AuditAgentTool is the audit action of a coding agent's request to use one of its
// tools, decided by the policy (its approval, when held, is audited as approvals
// are: who asked, who decided).
const AuditAgentTool = "agent_tool"

// ToolUse is a coding agent's request to use one of its tools (Claude Code's
// PermissionRequest hook): the policy decides it (policy.Match's agent, tool and
// input).
type ToolUse struct {
	Agent string // the agent's driver ("claude")
	Tool  string // the tool ("Bash", "Edit", "WebFetch", …)
	// Input is the tool's input as text: for Bash the command (decided as a
	// command too), for a tool on a file its path, for a fetch its URL.
	Input string
	// Held, when set, is called once the request is held for a person (an
	// approve rule), before CheckTool waits for the decision.
	Held func()
}

// BashTool is the tool whose input is a shell command.
const BashTool = "Bash"

// ErrToolUndecided is CheckTool's answer when no rule of the policy (or no
// policy) names the request: the node does not decide it, and the agent asks
// as it would without fleetmux (its own dialog).
var ErrToolUndecided = errors.New("no rule of the policy decides this tool use")

// CheckTool decides whether the agent in s's session, working for w (who spawned
// it), may use a tool: nil lets it (an allow rule); ErrToolUndecided when no rule
// matches (or there is no policy): the node decides nothing; a deny rule is a CodeDenied *api.Error naming
// the rule; an approve rule holds it as an approval of kind agent_tool and blocks
// until a person decides (nil when approved, CodeDenied naming the approval when
// denied or expired) or ctx ends (the agent stopped waiting: the approval expires).
// An agent spawned by nobody this node knows (w zero) is denied (UnknownWriter)
// under a policy. Every decision is audited (AuditAgentTool) with the policy
// version.
func (g *Guard) CheckTool(ctx context.Context, s *Session, w Writer, u ToolUse) error {
	if err := g.Loaded(ctx); err != nil {
		return err
	}
	req := policy.Request{Agent: u.Agent, Tool: u.Tool, Input: u.Input}
	if u.Tool == BashTool {
		req.Command = u.Input
	}
	d := g.decideRequest(s, w, req, nil)
	var err error
	switch d.Action {
	case api.ActionAllow:
		if d.Rule == "" {
			err = ErrToolUndecided
		}
	case api.ActionApprove:
		err = g.holdTool(ctx, s, w, u, d)
	default:
		err = &api.Error{Code: api.CodeDenied, Rule: d.Rule,
			Message: "denied by rule " + quoteRule(d.Rule) + " of the policy (version " + strconv.FormatUint(d.Version, 10) + ") on node " + g.cfg.Node + ": the agent may not use " + u.Tool}
	}
	g.auditTool(s, w, u, d, err)
	return err
}

// holdTool holds a tool request for a person (an approval of kind agent_tool) and
// waits for the decision.
func (g *Guard) holdTool(ctx context.Context, s *Session, w Writer, u ToolUse, d policy.Decision) error {
	ap, a, err := g.hold(s, w, u.Input, d, api.ApprovalAgentTool, nil, &u)
	if err != nil {
		return err
	}
	if s != nil {
		defer s.releaseTool(a.Addr()) // hold noted it
	}
	if u.Held != nil {
		u.Held()
	}
	select {
	case <-ap.decided:
	case <-ctx.Done():
		g.settle(ap, api.ApprovalExpired, "", "the agent stopped waiting for it (interrupted, or it exited)")
		return ctx.Err()
	}
	a = g.snapshot(ap)
	if a.State == api.ApprovalApproved {
		return nil
	}
	return &api.Error{Code: api.CodeDenied, Rule: d.Rule, Approval: a.Addr(), Message: deniedMessage(a)}
}

// auditTool audits the decision on a tool request.
func (g *Guard) auditTool(s *Session, w Writer, u ToolUse, d policy.Decision, err error) {
	rec := api.AuditRecord{Time: time.Now().UTC(), Node: g.cfg.Node, Actor: w.Actor, Principal: w.Principal, Role: w.Role,
		Action: AuditAgentTool, Detail: Truncate(u.Agent+" "+u.Tool+": "+g.RedactText(u.Input), 512), Result: "ok",
		Decision: d.Action, Rule: d.Rule, PolicyVersion: d.Version}
	if s != nil {
		rec.Session = s.t.ID()
	}
	if err != nil && !errors.Is(err, ErrToolUndecided) {
		rec.Result, rec.Error = api.CodeInternal, Truncate(err.Error(), 512)
		if ae, ok := err.(*api.Error); ok {
			rec.Result, rec.Error = ae.Code, Truncate(ae.Message, 512)
		}
	}
	g.cfg.Audit.Audit(rec)
}

// holdTool notes that the agent in s waits for approval addr of a tool use.
// Meanwhile no input or keys reach the session (toolHeld): the CLI shows its own
// permission dialog beside the hook that waits, and a key typed into it (a "1",
// an Enter) would answer it around the approval.
func (s *Session) holdTool(addr string) {
	s.mu.Lock()
	s.heldTools = append(s.heldTools, addr)
	s.mu.Unlock()
}

// releaseTool notes that approval addr is no longer waited for.
func (s *Session) releaseTool(addr string) {
	s.mu.Lock()
	if i := slices.Index(s.heldTools, addr); i >= 0 {
		s.heldTools = slices.Delete(s.heldTools, i, i+1)
	}
	s.mu.Unlock()
}

// toolHeld is the error for input data into s while its agent waits for the
// approval of a tool use (CodeBusy naming the approval); nil otherwise. An
// interrupt alone (Esc, C-c: the agent's interrupt keys) passes: it cancels the
// dialog, never answers yes, and the agent stops waiting (the approval expires).
func (s *Session) toolHeld(data []byte) error {
	if s == nil || string(data) == "\x1b" || string(data) == "\x03" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.heldTools) == 0 {
		return nil
	}
	addr := s.heldTools[0]
	return &api.Error{Code: api.CodeBusy, Approval: addr,
		Message: "the agent in " + s.addr() + " waits for approval " + addr + " of a tool use: input could answer its own dialog around it; decide the approval (fleetmux approve or deny " + addr + ")"}
}
