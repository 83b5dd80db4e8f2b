package session

import "errors"

// Errors callers match with errors.Is. Each error returned by this package wraps one of
// these (or ErrBadKey / ErrTruncated) with the details.
var (
	// ErrUnknownShell: Config.Shell is not a supported shell (bash or zsh).
	ErrUnknownShell = errors.New("session: unknown shell")
	// ErrBadConfig: a Config field is invalid (cwd, env, size, argv).
	ErrBadConfig = errors.New("session: bad config")
	// ErrBadCwd: the working directory does not exist or is not a directory.
	ErrBadCwd = errors.New("session: bad working directory")
	// ErrStart: the process could not be started.
	ErrStart = errors.New("session: cannot start process")
	// ErrBusy: a command is running and not waiting for input, so Run would interleave.
	ErrBusy = errors.New("session: busy")
	// ErrEmptyCommand: Run was given nothing to run.
	ErrEmptyCommand = errors.New("session: empty command")
	// ErrTooLarge: a command or input is over its size limit.
	ErrTooLarge = errors.New("session: too large")
	// ErrExited: the session's process has exited; it takes no more input.
	ErrExited = errors.New("session: process exited")
	// ErrClosed: the session was closed.
	ErrClosed = errors.New("session: closed")
	// ErrInputTimeout: the terminal did not accept input in time (nobody reads it).
	ErrInputTimeout = errors.New("session: input not accepted in time")
	// ErrNoBlock: there is no block with that number.
	ErrNoBlock = errors.New("session: no such block")
	// ErrSandbox: the sandbox could not confine the program (it never ran); it
	// also wraps sandbox.ErrUnsupported when the kernel lacks a part.
	ErrSandbox = errors.New("session: sandbox")
	// ErrNotStarted: the shell did not reach its first prompt in time.
	ErrNotStarted = errors.New("session: shell not ready")
)
