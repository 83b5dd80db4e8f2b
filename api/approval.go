package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Approvals (DESIGN "Guardrails"): a command that a policy rule with action
// approve matched waits for a person. The node that holds it numbers it a<N> (never
// reused while its data dir lives); its address is "NODE/aN", like a session's.

// Approval states (Approval.State).
const (
	ApprovalPending  = "pending"  // waiting for a person
	ApprovalApproved = "approved" // a person approved it: it runs (or ran)
	ApprovalDenied   = "denied"   // a person denied it: it never runs
	ApprovalExpired  = "expired"  // nobody decided within the rule's approve_within: denied
)

// Approval kinds (Approval.Kind): who types the command once it is approved.
const (
	// ApprovalRun: a run request (or one target of a fan-out), answered held at
	// once; once approved the node types the command itself, as the writer who
	// asked, and records its block (Approval.Block, Approval.ExitCode).
	ApprovalRun = "run"
	// ApprovalLine: a line typed at an integrated shell's prompt (input, keys, an
	// attach); the shell waits with the line unexecuted and runs it once approved.
	ApprovalLine = "line"
	// ApprovalInput: an input or keys request into a program without shell
	// integration (a REPL, a nested shell), held whole: nothing of it was written;
	// once approved the node writes it as it was asked (no block is recorded).
	ApprovalInput = "input"
	// ApprovalCreate: a create whose argv an approve rule matched, held whole:
	// no session was started; once approved the node creates it as it was asked,
	// as the writer who asked, and Approval.Session names it.
	ApprovalCreate = "create"
	// ApprovalAgentTool: a coding agent asks to use one of its tools (Claude
	// Code's PermissionRequest: Approval.Agent, Approval.Tool, and the tool's
	// input in Command); the agent waits, the tool unused, and uses it once
	// approved.
	ApprovalAgentTool = "agent_tool"
)

// Decisions (DecideBody.Decision).
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// Approval event types (ApprovalEvent.Type), published on <prefix>.approval.<node>.
const (
	ApprovalEventHeld     = "held"     // a new pending approval
	ApprovalEventApproved = "approved" // decided: approved
	ApprovalEventDenied   = "denied"   // decided: denied
	ApprovalEventExpired  = "expired"  // undecided in time: denied
	ApprovalEventDone     = "done"     // an approved run's block finished (or could not run)
)

// Approval is one held command (items of GET /v1/approvals, the node verbs
// approvals, approval and decide).
type Approval struct {
	ID      string `json:"id"` // a<N>
	Node    string `json:"node"`
	Session string `json:"session"`
	Kind    string `json:"kind"` // ApprovalRun, ApprovalLine, ApprovalInput, ApprovalCreate or ApprovalAgentTool
	Command string `json:"command"`
	// Agent (the driver) and Tool name what an agent_tool approval asks to use.
	Agent string `json:"agent,omitempty"`
	Tool  string `json:"tool,omitempty"`
	// Who asked: the verified principal, the actor label and the role of the writer
	// the command came from.
	Principal string `json:"principal,omitempty"`
	Actor     string `json:"actor,omitempty"`
	Role      string `json:"role,omitempty"`
	// The rule that held it and the policy version that decided.
	Rule          string `json:"rule"`
	PolicyVersion uint64 `json:"policy_version"`
	// Approvers are the roles beside admin that may decide (the rule's approvers).
	Approvers   []string  `json:"approvers,omitempty"`
	State       string    `json:"state"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Set once decided (expired: DecidedAt only).
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	DecidedBy string     `json:"decided_by,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	// Block is the block an approved run typed (0 until it was typed), ExitCode its
	// exit code once it finished (absent when unknown).
	Block    int  `json:"block,omitempty"`
	ExitCode *int `json:"exit_code,omitempty"`
	// Error says why an approved run could not be typed (the session was busy or
	// closed).
	Error string `json:"error,omitempty"`
	// Done: nothing more will happen to it: denied or expired, an approved line, or
	// an approved run whose block finished (or that could not run).
	Done bool `json:"done"`
}

// Addr is the approval's address, NODE/ID.
func (a Approval) Addr() string { return a.Node + "/" + a.ID }

// ApprovalList is the reply of GET /v1/approvals and of the approvals verb.
// Unavailable lists nodes that did not answer (controller only).
type ApprovalList struct {
	Approvals   []Approval `json:"approvals"`
	Unavailable []string   `json:"unavailable,omitempty"`
}

// ApprovalEvent is published on <prefix>.approval.<node> at each change.
type ApprovalEvent struct {
	Type     string    `json:"type"` // ApprovalEvent*
	Time     time.Time `json:"time"`
	Approval Approval  `json:"approval"`
}

// Node requests of the approval verbs.
type (
	// ApprovalsRequest (verb approvals): the node's approvals in State ("" for
	// every state), oldest first.
	ApprovalsRequest struct {
		State string `json:"state,omitempty"`
	}
	// ApprovalRequest (verb approval): one approval; with TimeoutMS > 0 the reply
	// waits (up to it, bounded by MaxWait) until the approval is Done.
	ApprovalRequest struct {
		ID        string `json:"id"`
		TimeoutMS int    `json:"timeout_ms,omitempty"`
	}
	// DecideRequest (verb decide): approve or deny a pending approval. Who decides
	// comes from the request's verified envelope, never from the body.
	DecideRequest struct {
		ID string `json:"id"`
		DecideBody
	}
)

// DecideBody is the body of POST /v1/approvals/{node}/{id}.
type DecideBody struct {
	Decision string `json:"decision"` // DecisionApprove or DecisionDeny
	Reason   string `json:"reason,omitempty"`
}

// Limits of approvals.
const (
	// MaxPendingApprovals bounds the approvals pending on one node at once; more are
	// refused with CodeLimit (nothing runs).
	MaxPendingApprovals = 64
	// MaxReasonBytes bounds a decision's reason.
	MaxReasonBytes = 1024
)

// ValidApprovalState checks a state filter: one of the approval states, or "" for all.
func ValidApprovalState(s string) error {
	switch s {
	case "", ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired:
		return nil
	}
	return fmt.Errorf("%w: approval state %q (want %s, %s, %s or %s)", ErrBadName, s, ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired)
}

// ValidApprovalID checks an approval id: "a" and a positive number.
func ValidApprovalID(id string) error {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "a"))
	if !strings.HasPrefix(id, "a") || err != nil || n < 1 || "a"+strconv.Itoa(n) != id {
		return fmt.Errorf("%w: approval id %q (want a<N>, e.g. a3)", ErrBadName, id)
	}
	return nil
}

// ParseApprovalAddr splits an approval's address NODE/ID.
func ParseApprovalAddr(addr string) (node, id string, err error) {
	node, id, ok := strings.Cut(addr, "/")
	if !ok {
		return "", "", fmt.Errorf("%w: approval %q: want NODE/ID (e.g. web-1/a3)", ErrBadName, addr)
	}
	if err := ValidName(node); err != nil {
		return "", "", err
	}
	if err := ValidApprovalID(id); err != nil {
		return "", "", err
	}
	return node, id, nil
}
