package api

import "time"

// Limits that more than one package enforces or reports: one value each. A package
// that needs a limit of its own keeps it unexported.
const (
	// MaxBodyBytes bounds an HTTP request body.
	MaxBodyBytes = 1 << 20
	// MaxPolicyBytes bounds a policy document (policy.MaxBytes, and PUT
	// /v1/policy's body).
	MaxPolicyBytes = 256 << 10
	// MaxCommandBytes bounds one command (run, fan-out, MCP).
	MaxCommandBytes = 256 << 10
	// MaxInputBytes bounds one input request (and one attach frame).
	MaxInputBytes = 256 << 10
	// MaxReadBytes bounds one read reply (its base64 stays under NATS's 1 MB).
	MaxReadBytes = 512 << 10
	// MaxTitleBytes and MaxDescBytes bound a session's title and description.
	MaxTitleBytes = 256
	MaxDescBytes  = 4096
	// MaxLabels bounds a session's or a node's labels, MaxLabelValueBytes a label's value.
	MaxLabels          = 32
	MaxLabelValueBytes = 256
	// DefaultMaxSessions is how many sessions a node keeps alive at once by default.
	DefaultMaxSessions = 64
	// MaxWait bounds a wait or a run's timeout; DefaultWait is used when none is given.
	MaxWait     = 10 * time.Minute
	DefaultWait = 30 * time.Second
	// DefaultMaxOutputBytes is the default text budget of a block.
	DefaultMaxOutputBytes = 16 << 10
)
