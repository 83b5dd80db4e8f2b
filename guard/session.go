package guard

import (
	"context"
	"strings"
	"sync"
	"time"
)

// Target is a node's session as the guard sees it; the node's entry implements it.
type Target interface {
	// ID is the session's id (set before the session is first checked).
	ID() string
	// Labels are the session's labels (matched by session_labels).
	Labels() map[string]string
	// Integrated reports whether a command typed now may go to an integrated
	// shell's prompt, which asks about it before it runs it (then a decided run's
	// line is expected, so it is not decided twice).
	Integrated() bool
	// BlockDone reports whether block n of the session has ended (or is unknown).
	BlockDone(n int) bool
	// Replay types an approved held request into the session as h.Writer, the
	// node acting as it would for the request itself (the writer lease, the
	// expected line), and returns the block it ran as and its exit code (0 and nil
	// when it typed into a program, not at a prompt). It returns when ctx ends
	// (the guard closes) or the session closes.
	Replay(ctx context.Context, h Held) (block int, exit *int, err error)
}

// Session is the guard's state of one session: its writer lease (lease.go), the
// line typed so far and by whom (input.go), the lines the node decided and is
// about to type, and its password prompts (sudo.go). Made by NewSession.
type Session struct {
	g     *Guard
	t     Target
	lease lease

	mu sync.Mutex // guards the fields below
	// expected are lines the node decided and is about to type (run): the shell's
	// check of exactly such a line consumes it and allows it without deciding again.
	expectedLines []expectedLine
	// pending is input text typed since the last line end (input.go).
	pending []byte
	// pendingBy is the writer who typed pending (zero while it is empty);
	// pendingMixed: another writer typed into it too. A line is the writer's whose
	// text it is: nobody completes a line someone else started (checkInput).
	pendingBy    Writer
	pendingMixed bool

	// typed are the lines writers' input ended (oldest first, bounded by
	// maxTyped and typedFor): a line the shell asks about is attributed to the
	// writer whose bytes formed it (LineWriter). pendingEdits: the pending line
	// holds keys the guard does not model (cursor moves, history, completion).
	typed        []typedLine
	pendingEdits editKeys
	// asked are lines attributed to writers before (newest last, bounded by
	// maxTyped): a line recalled from the history is its writer's again.
	asked []typedLine
	// planters are the principals who ran something in the session (newest last,
	// bounded by maxPlanters): a program they started may type into it, so none
	// of them approves a line or input asked there (Decide).
	planters []string

	sudo sudoState

	// heldTools are the pending approvals of the agent's tool uses in this
	// session (agenttool.go): no input reaches it meanwhile.
	heldTools []string
}

// NewSession is the guard state of the node's session t.
func (g *Guard) NewSession(t Target) *Session {
	s := &Session{g: g, t: t}
	s.lease.ttl = g.cfg.WriterLease
	return s
}

// addr is the session's address, node/id.
func (s *Session) addr() string { return s.g.cfg.Node + "/" + s.t.ID() }

type expectedLine struct {
	line  string
	until time.Time
}

// expectFor is how long a pre-approved line waits for the shell's check; maxExpected
// bounds the lines waiting (oldest dropped).
const (
	expectFor   = 30 * time.Second
	maxExpected = 16
)

// ExpectLine marks command as decided: the node is about to type it, and the
// shell's own check of that line must not decide (or hold) it again.
func (s *Session) ExpectLine(command string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	keep := s.expectedLines[:0]
	for _, x := range s.expectedLines {
		if now.Before(x.until) {
			keep = append(keep, x)
		}
	}
	if len(keep) >= maxExpected {
		keep = keep[1:]
	}
	s.expectedLines = append(keep, expectedLine{line: normLine(command), until: now.Add(expectFor)})
}

// expected consumes a pre-approved line equal to line, reporting whether there was
// one (then the shell runs it without a new decision).
func (s *Session) expected(line string) bool {
	line = normLine(line)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for i, x := range s.expectedLines {
		if x.line == line && now.Before(x.until) {
			s.expectedLines = append(s.expectedLines[:i], s.expectedLines[i+1:]...)
			return true
		}
	}
	return false
}

// expectedPiece reports whether line, a command the shell runs while no line is
// accepted (Request.Unaccepted), is a piece of a line the node decided and is
// typing: the shell can run a piece of it before accepting it (the first prompt
// not yet armed when the line arrives). The line stays expected.
func (s *Session) expectedPiece(line string) bool {
	line = normLine(line)
	if line == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, x := range s.expectedLines {
		if now.Before(x.until) && strings.Contains(x.line, line) {
			return true
		}
	}
	return false
}

// normLine is a command line as compared by expected: without the line ends and
// blanks around it.
func normLine(s string) string { return strings.TrimSpace(s) }
