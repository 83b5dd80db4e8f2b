package api

// Types of the controller's HTTP API (/v1, DESIGN.md) that the node API does not
// share. Requests and replies of routes that map onto one node verb reuse the node
// types (Session, Block, BlockResult, Screen, RunRequest, …).

// Node is an item of GET /v1/nodes.
type Node struct {
	Name     string            `json:"name"`
	Status   string            `json:"status"` // NodeAlive, NodeSuspect, NodeDisconnected, NodeDead, NodeLeft
	Labels   map[string]string `json:"labels,omitempty"`
	Addr     string            `json:"addr"`
	Version  string            `json:"version"`
	Sessions int               `json:"sessions"`
	Proto    int               `json:"proto,omitempty"`
	// Since is when the controller last saw the status change (RFC 3339).
	Since string `json:"since,omitempty"`
	// Sandbox is what the node can enforce of a sandbox profile (NodeMeta.Sandbox).
	Sandbox string `json:"sandbox,omitempty"`
}

// Node statuses: from two signals, gossip and the node's NATS connection (the
// controller's liveness.go has the table).
const (
	NodeAlive = "alive" // gossip says alive and it holds a NATS connection
	// NodeSuspect: usable, but one signal doubts it: it did not answer a request,
	// gossip says dead while its NATS connection is up (a CPU-starved node), or its
	// NATS connection closed a moment ago.
	NodeSuspect = "suspect"
	// NodeDisconnected: gossip says alive but it holds no NATS connection (its
	// agent is gone, or it is a gossip member that no node identity backs):
	// requests to it fail at once.
	NodeDisconnected = "disconnected"
	NodeDead         = "dead" // gossip says dead and it holds no NATS connection
	NodeLeft         = "left" // left the cluster on purpose (and its NATS connection closed)
)

// NodeList is the reply of GET /v1/nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// NewSession is the body of POST /v1/sessions. Without Node the controller picks the
// alive node with the fewest sessions.
type NewSession struct {
	Node string `json:"node,omitempty"`
	CreateRequest
}

// SessionPatch is the body of PATCH /v1/sessions/{node}/{id}: nil fields are left alone.
type SessionPatch struct {
	Title       *string           `json:"title,omitempty"`
	Description *string           `json:"description,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// RunBody is the body of POST /v1/sessions/{node}/{id}/run.
type RunBody struct {
	Command        string `json:"command"`
	TimeoutMS      int    `json:"timeout_ms,omitempty"`
	MaxOutputBytes int    `json:"max_output_bytes,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// TypeAnyway types the command even into a full-screen program (vim, top,
	// less), which is refused busy otherwise.
	TypeAnyway bool `json:"type_anyway,omitempty"`
}

// InputBody is the body of POST .../input.
type InputBody struct {
	Data string `json:"data"`
}

// KeysBody is the body of POST .../keys.
type KeysBody struct {
	Keys []string `json:"keys"`
}

// ResizeBody is the body of POST .../resize and the attach resize message.
type ResizeBody struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Selector picks the targets of a fan-out. Nodes and Labels select nodes (both:
// nodes that match both; All: every alive node); Sessions names sessions directly
// (NODE/ID addresses) and is exclusive with the others.
type Selector struct {
	All      bool              `json:"all,omitempty"`
	Nodes    []string          `json:"nodes,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Sessions []string          `json:"sessions,omitempty"`
}

// FanoutRequest is the body of POST /v1/run.
type FanoutRequest struct {
	Selector Selector `json:"selector"`
	Command  string   `json:"command"`
	// Session, when set, is the title of the session used on each selected node: the
	// first session with that title, created (with that title) when there is none.
	// Empty: a fresh session per node. Ignored with Selector.Sessions.
	Session string `json:"session,omitempty"`
	// Shell of created sessions (bash, zsh; default the node's).
	Shell string `json:"shell,omitempty"`
	// TimeoutMS is the per-target timeout (default 60 s).
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// MaxOutputBytes is the per-target text budget (as in run).
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// Batch is how many targets run at once (default and cap: 256).
	Batch int `json:"batch,omitempty"`
	// StopOnFailure: once a target fails (an error or a non-zero exit code), targets
	// not yet started are not started; they are reported with code "skipped".
	StopOnFailure bool `json:"stop_on_failure,omitempty"`
	// IdempotencyKey, when set, is passed to every target's run (per session).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// FanoutResult is one target's result.
type FanoutResult struct {
	Node         string `json:"node"`
	Session      string `json:"session,omitempty"`
	Block        *Block `json:"block,omitempty"`
	ExitCode     *int   `json:"exit_code,omitempty"`
	Text         string `json:"text"`
	OmittedBytes int64  `json:"omitted_bytes,omitempty"`
	// DurationMS is how long this target took, from its start to its result.
	DurationMS int64  `json:"duration_ms"`
	Error      *Error `json:"error"`
}

// Fanout is the reply of POST /v1/run. A target is ok only when its block finished
// with exit code 0: a block that finished with its code unknown (typed into a program
// without shell integration) is not ok (CodeExitUnknown).
type Fanout struct {
	Results []FanoutResult `json:"results"`
	OK      int            `json:"ok"`
	Failed  int            `json:"failed"`
}

// Fan-out result codes.
const (
	// CodeSkipped marks targets not started because of StopOnFailure.
	CodeSkipped = "skipped"
	// CodeExitStatus marks targets whose command finished with a non-zero exit code.
	CodeExitStatus = "exit_status"
	// CodeExitUnknown marks targets whose command finished with its exit code unknown
	// (the message says why: Block.ExitCodeNote).
	CodeExitUnknown = "exit_unknown"
)

// Health is the reply of GET /healthz.
type Health struct {
	Status string `json:"status"` // "ok" or "degraded"
	NATS   bool   `json:"nats"`
	Nodes  int    `json:"nodes"` // alive
}

// Attach WebSocket messages. Binary frames carry raw bytes both ways (client → input,
// server → output). Text frames carry AttachMsg JSON.
type AttachMsg struct {
	// Type: client → server AttachResize (Cols, Rows); server → client AttachExit
	// (the session exited; ExitCode) or AttachError (Error).
	Type     string `json:"type"`
	Cols     int    `json:"cols,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    *Error `json:"error,omitempty"`
}

// Types of attach messages (AttachMsg.Type).
const (
	AttachResize = "resize"
	AttachExit   = "exit"
	AttachError  = "error"
)

// HTTP headers of output routes.
const (
	// HeaderEnd is the session's output end offset when the reply was made.
	HeaderEnd = "Fleetmux-End"
	// HeaderOldest is the oldest offset the node can still read.
	HeaderOldest = "Fleetmux-Oldest"
)

// WaitResult is the reply of GET .../wait: whether the condition held before the
// timeout (OK), the session now, and its last block with its text (when it has one).
type WaitResult struct {
	OK bool `json:"ok"`
	BlockResult
}

// Error codes the controller adds to the node's.
const (
	CodeUnauthorized = "unauthorized" // missing or wrong API token
	CodeForbidden    = "forbidden"    // a cross-origin or non-loopback-host request without a token
)

// Queries of the HTTP API: what GET /v1/sessions, GET .../blocks/{n} and GET
// .../wait take in their query strings.
type (
	// SessionFilter narrows GET /v1/sessions: Node (?node=; empty: every node) and
	// Labels (?label=k=v; a session must carry all, its node's labels counting too).
	SessionFilter struct {
		Node   string
		Labels map[string]string
	}
	// BlockQuery selects the text of one block: Offset skips that many lines (after
	// Grep), Limit keeps at most that many (0: all), Grep keeps lines matching a
	// regular expression (each prefixed with its line number), MaxBytes is the text
	// budget (0: the default, negative: unlimited).
	BlockQuery struct {
		Offset, Limit int
		Grep          string
		MaxBytes      int
	}
	// WaitQuery says what a wait waits for: Until is one of the Until* words
	// (UntilOutput: output past After); TimeoutMS bounds the wait (0: DefaultWait).
	WaitQuery struct {
		Until     string
		TimeoutMS int
		After     int64
	}
)
