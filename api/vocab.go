package api

// The words of the protocol: one definition each. Every package that speaks of a
// session state, a block state, an event type or a role uses these constants (session
// converts them to its own typed values); a bare "idle" anywhere else is a bug.

// Session states (Session.State).
const (
	StateStarting     = "starting"      // the shell has not shown its first prompt
	StateIdle         = "idle"          // at the shell prompt
	StateRunning      = "running"       // a command runs
	StateWaitingInput = "waiting_input" // the foreground program is blocked reading the terminal
	StateExited       = "exited"        // the process has exited
)

// Block states (Block.State).
const (
	BlockRunning = "running"
	BlockDone    = "done"
)

// Conditions of the wait verb (WaitRequest.Until): the session states above plus
// UntilOutput.
const (
	UntilIdle         = StateIdle
	UntilWaitingInput = StateWaitingInput
	UntilExited       = StateExited
	UntilOutput       = "output" // output beyond WaitRequest.After exists
)

// Shell integration of a session (Session.Integration).
const (
	IntegrationOK   = "ok"   // the shell reports each command's end and exit code
	IntegrationLost = "lost" // the shell runs without fleetmux's hooks (it exec'd another shell): exit codes are unknown
	IntegrationNone = "none" // a program without shell integration
)

// Why a finished block has no exit code (Block.ExitCodeNote). A block with an exit
// code has no note; a done block without one always has one.
const (
	NoteFallback  = "typed into a program without shell integration: its exit code is not known"
	NoteLost      = "typed into the session's shell after its shell integration was lost (e.g. exec of another shell): the exit code is not known"
	NoteEndLost   = "the shell integration did not report the end of this command (its hooks were replaced or removed): the exit code is not known"
	NoteNothing   = "nothing ran: the line was empty or only comments"
	NoteExited    = "the session ended before the command finished"
	NoteNotTyped  = "the command could not be typed into the session"
	NoteMarkMixup = "the shell integration's marks for this command were inconsistent: the exit code is not known"
	NoteRejected  = "the shell went back to its prompt without running the line and set no exit status (e.g. a failed ! history expansion)"
	// NoteDenied: the guard denied the line before it ran; the rule's name follows.
	NoteDenied = "denied by policy rule"
)

// Block event types (BlockEvent.Type).
const (
	BlockStarted  = "started"
	BlockFinished = "finished"
)

// Session event types (SessionEvent.Type).
const (
	EventCreated = "created"
	EventState   = "state"
	EventCwd     = "cwd"
	EventResized = "resized"
	EventInfo    = "info" // title, description or labels changed
	EventExited  = "exited"
	EventClosed  = "closed"
)

// DevVersion is the version of a build that was given none: cmd sets the real one
// with -ldflags "-X main.version=…" and passes it to the node and the controller.
const DevVersion = "dev"

// Roles of people and agents (SSH keys, API tokens, signed requests). Each role may
// do everything the one before it may.
const (
	RoleViewer   = "viewer"   // reads and watches
	RoleOperator = "operator" // also creates sessions, runs, types and resizes
	RoleAdmin    = "admin"    // also kills, sets policy, manages tokens, enrolls and approves
)

// Policy actions: what a guardrail rule decides for a request (DESIGN "Guardrails").
const (
	ActionAllow   = "allow"   // runs
	ActionDeny    = "deny"    // does not run; the caller sees the rule's name
	ActionApprove = "approve" // held until a person decides
)
