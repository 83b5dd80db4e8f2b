package node

import (
	"context"

	"github.com/fleetmux/fleetmux/session"
)

// sessionHandle is all the node asks of a session: an in-process
// *session.Session today, a proxy for a session kept by a holder process (sessions
// that outlive the agent) later. The node never reaches a session another way.
// Values cross it as session's types (Info, Block, Result, Event, Screen, Viewer),
// and errors wrap session's sentinels (sessionErr maps them to api codes).
//
// Every method is safe for concurrent use. Run, WaitBlock and Wait block until
// their condition or ctx; the others do not block on the program.
type sessionHandle interface {
	// Info is a snapshot of the session's fields and state.
	Info() session.Info
	// SetInfo changes the title, description and labels (nil: unchanged).
	SetInfo(title, description *string, labels map[string]string)
	// Close ends the program (SIGHUP, then SIGKILL) and waits for it; viewers then
	// read to EOF. Idempotent.
	Close() error
	// Detach stops following the session and leaves its program running in its
	// holder, for the next agent (Close for a local session).
	Detach() error

	// Run types command at the prompt and waits for its block (Timeout, ctx).
	Run(ctx context.Context, command string, opts session.RunOptions) (session.Result, error)
	// WaitBlock waits for block n to finish, within opts.Timeout and ctx.
	WaitBlock(ctx context.Context, n int, opts session.RunOptions) (session.Result, error)
	// Wait waits until the condition holds (output: beyond offset after) or ctx is
	// done, and returns the session as it is then.
	Wait(ctx context.Context, until session.Until, after int64) (session.Info, error)
	// Input writes raw bytes to the PTY; SendKeys writes named keys.
	Input(p []byte) error
	SendKeys(names ...string) error
	// Reader is the foreground process blocked reading the terminal, if any.
	Reader() (pid int, ok bool)
	// SoleReader reports whether pid is the only process that can read the
	// terminal now (it alone in the foreground process group; no process outside
	// the session holding the terminal open).
	SoleReader(pid int) bool
	// Resize sets the terminal size.
	Resize(cols, rows int) error
	// SetRedactor replaces the redactor of the output (nil: none), releasing what
	// the old one holds back first.
	SetRedactor(r session.Redactor)

	// Screen renders the current screen.
	Screen() (session.Screen, error)
	// Blocks lists the blocks; BlockText renders one with a budget.
	Blocks() []session.Block
	// Block is block n (session.ErrNoBlock when there is none).
	Block(n int) (session.Block, error)
	BlockText(n int, opts session.TextOptions) (session.Result, error)
	// Read returns up to max bytes of output from offset from (session.ErrTruncated
	// when from is older than the scrollback, nothing at or past the end); Offsets
	// says what the scrollback holds: [oldest, end).
	Read(from int64, max int) ([]byte, error)
	Offsets() (oldest, end int64)
	// ScrollbackBytes is the scrollback ring's size.
	ScrollbackBytes() int

	// Subscribe follows the output from offset from (the publisher and recorder,
	// with Viewer.TryNext).
	Subscribe(from int64, opts session.ViewerOptions) *session.Viewer
	// Events returns the events after seq (Config.Notify tells when there may be
	// new ones).
	Events(after uint64) ([]session.Event, uint64)
}

var _ sessionHandle = (*session.Session)(nil)

// startSession starts a session in this process; the holder will bring another.
func startSession(cfg session.Config) (sessionHandle, error) {
	s, err := session.Start(cfg)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return s, nil
}
