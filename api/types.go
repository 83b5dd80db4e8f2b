package api

import (
	"errors"
	"fmt"
	"time"
)

// Session is a session as the API shows it.
type Session struct {
	Node           string            `json:"node"`
	ID             string            `json:"id"`
	Title          string            `json:"title"`
	Description    string            `json:"description"`
	Labels         map[string]string `json:"labels,omitempty"`
	Shell          string            `json:"shell,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	State          string            `json:"state"`
	CurrentCommand string            `json:"current_command,omitempty"`
	Cwd            string            `json:"cwd"`
	LastExitCode   *int              `json:"last_exit_code,omitempty"`
	ExitCode       *int              `json:"exit_code,omitempty"`
	Cols           int               `json:"cols"`
	Rows           int               `json:"rows"`
	Pid            int               `json:"pid"`
	OutputOffset   int64             `json:"output_offset"`
	CreatedAt      time.Time         `json:"created_at"`
	WaitingInput   bool              `json:"waiting_input"`
	Echo           bool              `json:"echo"`
	Blocks         int               `json:"blocks"`
	// Integration is IntegrationOK, IntegrationLost or IntegrationNone.
	Integration string `json:"integration,omitempty"`
	// Owner is the principal that created the session (token:NAME, ssh:…), from
	// its verified request; empty for a session whose creator is not known. The
	// owner may close it, an admin any session.
	Owner string `json:"owner,omitempty"`
	// ReapAt, on an exited session, is when the node removes it from its list
	// (the node's --reap-exited); absent while it runs or when it is kept.
	ReapAt *time.Time `json:"reap_at,omitempty"`
	// Agent is the driver of the coding agent the session runs (api.Driver*);
	// empty for a session that is no agent (GET /v1/agents/{node}/{id} tells more).
	Agent string `json:"agent,omitempty"`
	// Sandbox is the profile the session's program runs under (fixed at its
	// creation); absent for none.
	Sandbox *SandboxProfile `json:"sandbox,omitempty"`
}

// Block is one command and its output range [Start, End).
type Block struct {
	N          int        `json:"n"`
	Command    string     `json:"command"`
	Cwd        string     `json:"cwd"`
	State      string     `json:"state"` // running, done
	ExitCode   *int       `json:"exit_code,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Start      int64      `json:"start"`
	End        int64      `json:"end"`
	// Fallback: typed into a program without shell integration; no exit code.
	Fallback bool `json:"fallback,omitempty"`
	// ExitCodeNote says in words why a done block has no exit code (one of the Note
	// words); empty when it has one.
	ExitCodeNote string `json:"exit_code_note,omitempty"`
}

// BlockResult is the reply of run, block and wait: a block with its rendered text.
type BlockResult struct {
	Block        Block   `json:"block"`
	Text         string  `json:"text"`
	OmittedBytes int64   `json:"omitted_bytes"`
	LostBytes    int64   `json:"lost_bytes,omitempty"`
	Session      Session `json:"session"`
}

// Screen is the reply of screen (and session's Screen).
type Screen struct {
	// Text is the screen's rows joined by "\n", trailing spaces and trailing empty
	// rows removed.
	Text         string `json:"text"`
	Cursor       Cursor `json:"cursor"`
	AltScreen    bool   `json:"alt_screen"`
	Cols         int    `json:"cols"`
	Rows         int    `json:"rows"`
	WaitingInput bool   `json:"waiting_input"`
	Echo         bool   `json:"echo"`
	// Program names the program in front (its process name) while the shell is
	// not at its prompt; FullScreen says it is a full-screen program (on the
	// alternate screen, or top): it reads keys, not command lines.
	Program    string `json:"program,omitempty"`
	FullScreen bool   `json:"full_screen,omitempty"`
}

// Cursor is a 0-based screen position.
type Cursor struct {
	Row int `json:"row"`
	Col int `json:"col"`
}

// BlockEvent is published on the block subject when a block starts or finishes.
type BlockEvent struct {
	Type    string    `json:"type"` // "started" or "finished"
	Node    string    `json:"node"`
	Session string    `json:"session"`
	Seq     uint64    `json:"seq"` // the session's event sequence number
	Time    time.Time `json:"time"`
	Block   Block     `json:"block"`
}

// SessionEvent is published on the event subject: created, state, cwd, resized,
// info (title/description/labels), exited, closed.
type SessionEvent struct {
	Type     string    `json:"type"`
	Node     string    `json:"node"`
	Session  string    `json:"session"`
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	State    string    `json:"state,omitempty"`
	Cwd      string    `json:"cwd,omitempty"`
	Cols     int       `json:"cols,omitempty"`
	Rows     int       `json:"rows,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Title    string    `json:"title,omitempty"`
	// Holder and Previous: of an EventTakenOver, the writer that has the lease now
	// and the one that lost it.
	Holder   *Writer `json:"holder,omitempty"`
	Previous *Writer `json:"previous,omitempty"`
}

// AuditRecord is published for every mutating request.
type AuditRecord struct {
	Time    time.Time `json:"time"`
	Node    string    `json:"node"`
	Session string    `json:"session,omitempty"`
	// Actor is the label the client chose (HeaderActor, "mcp:NAME"; in a node's
	// record the one the verified envelope carries): anyone may claim any label,
	// so it is never an identity (Principal is). "" means unknown.
	Actor string `json:"actor"`
	// Principal is who the controller authenticated: "token:NAME",
	// "ssh:FINGERPRINT". A controller's actor is a label the client chose; only the
	// principal is an identity.
	Principal string `json:"principal,omitempty"`
	// Role and Controller come from a node request's verified envelope: the actor's
	// role and the controller that signed it.
	Role       string `json:"role,omitempty"`
	Controller string `json:"controller,omitempty"`
	// Claimed is the bare api.HeaderActor of a request refused before it was
	// verified: a label of what it claimed, never an identity.
	Claimed string `json:"claimed_actor,omitempty"`
	Action  string `json:"action"`           // the verb
	Detail  string `json:"detail,omitempty"` // e.g. the command, bounded
	Result  string `json:"result"`           // "ok" or the error code
	Error   string `json:"error,omitempty"`
	// Decision, Rule and PolicyVersion are the guardrail decision a node made for
	// the request (DESIGN "Guardrails"): the action (ActionAllow, …), the rule that
	// decided ("" when none matched) and the version (the FLEETMUX_POLICY
	// revision) of the policy in force; 0 and absent when no policy was set. A
	// controller's record of setting a policy names the version it stored.
	Decision      string `json:"decision,omitempty"`
	Rule          string `json:"rule,omitempty"`
	PolicyVersion uint64 `json:"policy_version,omitempty"`
	// TraceID is the OpenTelemetry trace (32 hex digits) the request was part of,
	// when it was traced (docs/observability.md): the key from a record to its spans.
	TraceID string `json:"trace_id,omitempty"`
}

// NodeMeta is what a node gossips about itself (memberlist metadata, ≤ 512 bytes).
type NodeMeta struct {
	Name     string            `json:"name"`
	Labels   map[string]string `json:"labels,omitempty"`
	Version  string            `json:"version"`
	Sessions int               `json:"sessions"`
	Proto    int               `json:"proto"`
	// Role is "" for a node agent and RoleController for a controller (controllers
	// gossip too, and are not nodes).
	Role string `json:"role,omitempty"`
	// Published is the output bytes the node has published since it started
	// (refreshed every few seconds at most).
	Published int64 `json:"pub,omitempty"`
	// Sandbox is what the node's kernel can enforce of a sandbox profile
	// (SandboxCaps.String: "landlock=7 netns cgroup=1"); "" when unknown.
	Sandbox string `json:"sbx,omitempty"`
}

// RoleController is NodeMeta.Role of a controller.
const RoleController = "controller"

// Requests of the node API (one per verb; the verb is the last subject token).
type (
	// CreateRequest (verb create).
	CreateRequest struct {
		Title       string            `json:"title,omitempty"`
		Description string            `json:"description,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Shell       string            `json:"shell,omitempty"`
		Argv        []string          `json:"argv,omitempty"`
		Cwd         string            `json:"cwd,omitempty"`
		Env         map[string]string `json:"env,omitempty"`
		Cols        int               `json:"cols,omitempty"`
		Rows        int               `json:"rows,omitempty"`
		// User runs the session's program as this local user of the node (its uid,
		// gid, groups, home and login variables); the node agent must run as root.
		// For untrusted workloads: processes of one user can read each other's
		// memory where ptrace allows it, and with it a shell's nonce.
		User string `json:"user,omitempty"`
		// Sandbox names a profile of the policy's sandboxes to run under instead of
		// the one its rules choose; it must be at least as strict ("none": no
		// profile, only when the rules choose none).
		Sandbox string `json:"sandbox,omitempty"`
	}
	// SessionRequest names a session (verbs get, close, screen, blocks).
	SessionRequest struct {
		Session string `json:"session"`
	}
	// UpdateRequest (verb update): nil fields are left alone.
	UpdateRequest struct {
		Session     string            `json:"session"`
		Title       *string           `json:"title,omitempty"`
		Description *string           `json:"description,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
	}
	// RunRequest (verb run).
	RunRequest struct {
		Session        string `json:"session"`
		Command        string `json:"command"`
		TimeoutMS      int    `json:"timeout_ms,omitempty"`
		MaxOutputBytes int    `json:"max_output_bytes,omitempty"`
		IdempotencyKey string `json:"idempotency_key,omitempty"`
		TypeAnyway     bool   `json:"type_anyway,omitempty"` // see RunBody
	}
	// InputRequest (verb input): raw text typed into the session.
	InputRequest struct {
		Session string `json:"session"`
		Data    string `json:"data"`
		// Attach: a person typing in an attach (the SSH front door, the WebSocket
		// attach): their writer lease says so (Writer.Attach).
		Attach bool `json:"attach,omitempty"`
	}
	// KeysRequest (verb keys): named keys (C-c, Enter, Up, F1, …).
	KeysRequest struct {
		Session string   `json:"session"`
		Keys    []string `json:"keys"`
	}
	// ResizeRequest (verb resize).
	ResizeRequest struct {
		Session string `json:"session"`
		Cols    int    `json:"cols"`
		Rows    int    `json:"rows"`
	}
	// BlockRequest (verb block): one block's text.
	BlockRequest struct {
		Session  string `json:"session"`
		N        int    `json:"n"`
		Offset   int    `json:"offset,omitempty"`
		Limit    int    `json:"limit,omitempty"`
		Grep     string `json:"grep,omitempty"`
		MaxBytes int    `json:"max_bytes,omitempty"`
	}
	// ReadRequest (verb read): raw output from an offset.
	ReadRequest struct {
		Session string `json:"session"`
		From    int64  `json:"from"`
		Max     int    `json:"max,omitempty"` // default and cap: MaxChunk*8
	}
	// WaitRequest (verb wait).
	WaitRequest struct {
		Session   string `json:"session"`
		Until     string `json:"until"`           // idle, waiting_input, exited, output
		After     int64  `json:"after,omitempty"` // output: an offset to pass
		TimeoutMS int    `json:"timeout_ms,omitempty"`
	}
)

// Replies of the node API that are not one of the types above.
type (
	// SessionList is the reply of list.
	SessionList struct {
		Sessions []Session `json:"sessions"`
		// Unavailable lists nodes whose sessions are missing from a fleet-wide list
		// because they did not answer (controller only).
		Unavailable []string `json:"unavailable,omitempty"`
		// Node is what the node says of itself (a node's own list; absent from a
		// fleet-wide list).
		Node *NodeMeta `json:"node,omitempty"`
	}
	// BlockList is the reply of blocks.
	BlockList struct {
		Blocks []Block `json:"blocks"`
	}
	// ReadReply is the reply of read. Data is the raw bytes (base64 in JSON).
	ReadReply struct {
		Offset int64  `json:"offset"` // of Data's first byte (= the request's From)
		Data   []byte `json:"data"`
		End    int64  `json:"end"`    // the session's output end now
		Oldest int64  `json:"oldest"` // the oldest offset the node can still read
	}
	// WaitReply is the reply of wait: the session, and whether the condition held
	// (false when the timeout passed first).
	WaitReply struct {
		Session Session `json:"session"`
		OK      bool    `json:"ok"`
	}
	// Empty is the reply of verbs that return nothing.
	Empty struct{}
)

// Error codes. HTTP statuses for them are the controller's business.
const (
	CodeBadRequest  = "bad_request" // malformed JSON, bad names, bad values
	CodeNotFound    = "not_found"   // unknown session or block
	CodeBusy        = "busy"        // a command is running and not waiting for input
	CodeExited      = "exited"      // the session's process has exited
	CodeTooLarge    = "too_large"   // a payload over its limit
	CodeLimit       = "limit"       // too many sessions
	CodeTimeout     = "timeout"     // the node did not answer in time
	CodeUnavailable = "unavailable" // the node is unreachable or dead
	CodeGone        = "gone"        // output no longer held anywhere
	CodeInternal    = "internal"    // anything else
	CodeDenied      = "denied"      // a guardrail rule denied it (Error.Rule names the rule)
	CodeHeld        = "held"        // a guardrail rule holds it for a person (Error.Approval)
)

// Error is the error of every API reply: {"error": {"code": ..., "message": ...}}.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Rule names the guardrail rule behind a denied or held reply.
	Rule string `json:"rule,omitempty"`
	// Approval is the address ("NODE/ID") of the approval a held request waits for.
	Approval string `json:"approval,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Is makes errors.Is(err, &Error{Code: c}) match on the code alone.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code && t.Message == ""
}

// ErrorReply is the JSON envelope of an error reply.
type ErrorReply struct {
	Error *Error `json:"error"`
}

// Errorf builds an *Error.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
