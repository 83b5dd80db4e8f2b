package api

import "time"

// Exec (DESIGN "Exec"): a one-shot process on a node, without a PTY, its stdout
// and stderr captured apart. Decided by the node's policy before it starts (argv
// joined as the command line a shell would read), redacted and audited as session
// output and commands are.

// The exec verbs of the node API.
const (
	VerbExec       = "exec"        // start one (and wait up to its timeout)
	VerbExecGet    = "exec_get"    // one exec's state and output so far
	VerbExecWait   = "exec_wait"   // wait for a background exec to end
	VerbExecOutput = "exec_output" // one stream's bytes from an offset
	VerbExecKill   = "exec_kill"   // end a running exec (its process group)
)

// Exec limits.
const (
	// DefaultExecOutputBytes is the default cap of each stream in a reply: head
	// and tail kept, the middle counted in *_omitted.
	DefaultExecOutputBytes = 64 << 10
	// MaxExecOutputBytes is the most of each stream a reply carries (both stay
	// well under NATS's 1 MB with JSON escaping).
	MaxExecOutputBytes = 192 << 10
	// MaxExecStdinBytes bounds the stdin given to an exec.
	MaxExecStdinBytes = 256 << 10
	// DefaultExecTimeout is an exec's timeout when none is given.
	DefaultExecTimeout = 60 * time.Second
	// ExecKeep is how long a node keeps a finished exec to be found by its id.
	ExecKeep = 24 * time.Hour
)

// Exec states.
const (
	ExecRunning = "running"
	ExecDone    = "done"
)

// ExecLost is the Signal of a background exec whose keeper ended without
// recording how its program ended (it was killed, the host rebooted): done,
// with exit code -1.
const ExecLost = "lost"

// Exec streams (the output verb's stream).
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// ExecRequest is the body of POST /v1/exec and of the node's exec verb (Node
// and Selector are the controller's; a node ignores them). Exactly one of Argv
// and Command: Command is run by `sh -c`.
type ExecRequest struct {
	Node     string    `json:"node,omitempty"`
	Selector *Selector `json:"selector,omitempty"`
	Argv     []string  `json:"argv,omitempty"`
	Command  string    `json:"command,omitempty"`
	// Cwd is the working directory (default: the node's home directory).
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Stdin is given to the process on its standard input; without it stdin is
	// /dev/null (a process never waits on a terminal that is not there).
	Stdin *string `json:"stdin,omitempty"`
	// TimeoutMS: a foreground exec is killed (its whole process group) when it
	// passes and its output so far comes back with timed_out; a background exec
	// keeps running and the reply says so. Default 60 s, at most MaxWait.
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// MaxOutputBytes caps each stream in the reply (head and tail kept); default
	// DefaultExecOutputBytes, at most MaxExecOutputBytes.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// Background: the process outlives the request's timeout; find it again by
	// its exec_id.
	Background bool `json:"background,omitempty"`
}

// ExecResult is one exec as the API shows it: the reply of POST /v1/exec (one
// node), of GET /v1/exec/{node}/{id} and of …/wait.
type ExecResult struct {
	Node   string   `json:"node"`
	ExecID string   `json:"exec_id"`
	Argv   []string `json:"argv"`
	// State is ExecRunning or ExecDone.
	State string `json:"state"`
	// ExitCode is absent while it runs; a process ended by a signal has 128+N (as
	// shells report it) and Signal names it ("SIGKILL").
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// Stdout and Stderr are the streams apart (redacted; invalid UTF-8 becomes
	// U+FFFD), each cut to head and tail around a marker line when over the cap:
	// *_omitted counts the bytes left out.
	Stdout        string `json:"stdout"`
	Stderr        string `json:"stderr"`
	StdoutOmitted int64  `json:"stdout_omitted"`
	StderrOmitted int64  `json:"stderr_omitted"`
	// StdoutBytes and StderrBytes are the streams' whole lengths so far.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// TimedOut: the timeout passed while it ran (a foreground exec was killed).
	TimedOut   bool      `json:"timed_out"`
	Background bool      `json:"background,omitempty"`
	DurationMS int64     `json:"duration_ms"`
	StartedAt  time.Time `json:"started_at"`
	// Error is set in a fan-out's results for a node where the exec did not run.
	Error *Error `json:"error,omitempty"`
}

// ExecFanout is the reply of POST /v1/exec with a selector: one result per node.
type ExecFanout struct {
	Results []ExecResult `json:"results"`
	OK      int          `json:"ok"`
	Failed  int          `json:"failed"`
}

// ExecTarget names one exec (the node verbs exec_get, exec_wait, exec_kill).
type ExecTarget struct {
	ExecID string `json:"exec_id"`
	// TimeoutMS bounds exec_wait (default DefaultWait, at most MaxWait).
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// MaxOutputBytes caps each stream of the reply (as in ExecRequest).
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
}

// ExecOutputRequest asks for one stream's bytes from offset From (exec_output).
type ExecOutputRequest struct {
	ExecID string `json:"exec_id"`
	Stream string `json:"stream"`
	From   int64  `json:"from"`
	Max    int    `json:"max,omitempty"`
}

// ExecOutput is the reply of GET /v1/exec/{node}/{id}/output: Data from Offset
// (redacted), End the stream's length so far, Oldest the oldest offset still
// held (the node keeps the head and the newest bytes of each stream).
type ExecOutput struct {
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	// Next is the offset to read from next (Offset plus the bytes Data was read
	// from: redaction may change its length).
	Next   int64  `json:"next"`
	Data   string `json:"data"`
	End    int64  `json:"end"`
	Oldest int64  `json:"oldest"`
	Done   bool   `json:"done"`
}
