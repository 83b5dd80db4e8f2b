package session

import (
	"bytes"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// State is a session's state, as DESIGN.md defines it; its values are api's words.
type State string

const (
	StateStarting     State = api.StateStarting     // the shell has not shown its first prompt
	StateIdle         State = api.StateIdle         // at the shell prompt
	StateRunning      State = api.StateRunning      // a command runs
	StateWaitingInput State = api.StateWaitingInput // the foreground program is blocked reading the terminal
	StateExited       State = api.StateExited       // the process has exited
)

// Integration says whether the session's shell integration works (Info.Integration);
// its values are api's words.
type Integration string

const (
	IntegrationOK   Integration = api.IntegrationOK
	IntegrationLost Integration = api.IntegrationLost
	IntegrationNone Integration = api.IntegrationNone
)

// BlockState is the state of one block; its values are api's words.
type BlockState string

const (
	BlockRunning BlockState = api.BlockRunning
	BlockDone    BlockState = api.BlockDone
)

// Block is one command and its output range [Start, End) in the output stream.
type Block struct {
	N          int        `json:"n"`
	Command    string     `json:"command"`
	Cwd        string     `json:"cwd"`
	State      BlockState `json:"state"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt time.Time  `json:"finished_at,omitzero"`
	Start      int64      `json:"start"`
	End        int64      `json:"end"` // while running: the output end when observed
	// Fallback marks a command typed into a program without shell integration (a
	// nested shell, ssh, a REPL): it ended when the program waited for input again
	// and output settled, and it has no exit code.
	Fallback bool `json:"fallback,omitempty"`
	// Note says why a finished block has no exit code (one of the Note constants).
	Note string `json:"exit_code_note,omitempty"`
	// Echo is the offset where the command's typed echo ends in fallback blocks and in
	// blocks the shell never ran (syntax errors); 0 otherwise.
	echoFrom int64
	prompt   bool // the trailing line is the program's prompt (fallback)
	// prompted: the shell's prompt (A or B) came back at promptAt while the block was
	// open, so its output ended there even if its D comes later or never.
	prompted bool
	promptAt int64
}

// EventKind names a session event. The kinds that are also session events on the
// wire have api's words; a block's start and finish are block events there
// (api.BlockStarted, api.BlockFinished).
type EventKind string

const (
	EventCreated       EventKind = api.EventCreated
	EventState         EventKind = api.EventState
	EventBlockStarted  EventKind = "block_started"
	EventBlockFinished EventKind = "block_finished"
	EventCwd           EventKind = api.EventCwd
	EventResized       EventKind = api.EventResized
	EventInfo          EventKind = api.EventInfo
	EventExited        EventKind = api.EventExited
)

// Event is one thing that happened to a session, numbered from 1.
type Event struct {
	Seq      uint64    `json:"seq"`
	Kind     EventKind `json:"kind"`
	Time     time.Time `json:"time"`
	State    State     `json:"state,omitempty"`
	Block    *Block    `json:"block,omitempty"`
	Cwd      string    `json:"cwd,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Cols     int       `json:"cols,omitempty"`
	Rows     int       `json:"rows,omitempty"`
}

const maxEvents = 4096

// emitLocked appends an event to the bounded event log.
func (s *Session) emitLocked(e Event) {
	s.eventSeq++
	e.Seq = s.eventSeq
	if e.Kind == EventBlockStarted || e.Kind == EventBlockFinished {
		s.ckptWant = true // checkpoint.go
	}
	e.Time = time.Now().UTC()
	if e.Block != nil {
		b := *e.Block
		e.Block = &b
	}
	if len(s.events) >= maxEvents {
		n := copy(s.events, s.events[len(s.events)-maxEvents/2:])
		s.events = s.events[:n]
	}
	s.events = append(s.events, e)
}

// Events returns the events with Seq > after (oldest first) and the Seq to pass next
// time. Events older than the bounded log are gone; a caller notices by the gap in Seq.
func (s *Session) Events(after uint64) ([]Event, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.events)
	for i > 0 && s.events[i-1].Seq > after {
		i--
	}
	out := append([]Event(nil), s.events[i:]...)
	return out, s.eventSeq
}

// Why a finished block has no exit code (Block.Note): api's sentences.
const (
	NoteFallback  = api.NoteFallback
	NoteLost      = api.NoteLost
	NoteEndLost   = api.NoteEndLost
	NoteNothing   = api.NoteNothing
	NoteExited    = api.NoteExited
	NoteNotTyped  = api.NoteNotTyped
	NoteMarkMixup = api.NoteMarkMixup
	NoteRejected  = api.NoteRejected
)

// applyMarkLocked advances the block state machine with one mark at offset off.
//
// The machine tolerates lost, duplicated and out-of-order marks: a block never takes an
// exit code that is not its own, and a lost mark costs at most the code of the block
// it belonged to (which then ends with no code and a Note saying why), never the next
// block. The marks of one prompt cycle are D (or N) and the cwd from the prompt hook,
// then A and B from the prompt itself; C when the shell starts a command.
func (s *Session) applyMarkLocked(m mark, off int64) {
	if !s.integRemoved && m.kind != markMode {
		// A mark means the shell has read its startup files; the directory goes
		// now rather than at exit.
		s.integRemoved = true
		s.integ.remove()
	}
	if m.kind == markPrompt && s.image == (procImage{}) && s.integrated && s.pid > 0 {
		// The start did not read the shell's image whole (it was read in the middle
		// of the exec): our prompt is the shell's own, its image is done now.
		s.image, _ = readImage(s.pid)
	}
	if m.kind == markDone || m.kind == markNoRun {
		s.lost = false // our prompt hook reports the ends of commands again
	}
	var denied *denial // the guard's "no" for the line that ends here (guard.go)
	if m.kind == markDone || m.kind == markNoRun || m.kind == markReprompt {
		denied, s.denied = s.denied, nil
	}
	if m.kind == markOutput || m.kind == markDone || m.kind == markNoRun || m.kind == markReprompt {
		// The shell acted on the guard's answer. (Not A or B: zsh redraws its
		// prompt after printing a denial, before it drops the line.)
		s.guardAwait = false
		s.guardMarks++
	}
	switch m.kind {
	case markMode:
		if m.mode == 2004 {
			s.paste = m.on
		} else {
			if len(s.alt) >= maxAltToggles {
				s.alt = append(s.alt[:0], s.alt[len(s.alt)-maxAltToggles/2:]...)
			}
			s.alt = append(s.alt, altToggle{off: off, on: m.on})
			if m.on && s.screen != nil {
				s.screen.altOnLocked() // the emulator follows a full-screen program
			}
		}
		return
	case markPrompt, markInput:
		// A and B also come when the line editor redraws the prompt (bash redraws it
		// after a bracketed paste), so they only say where input starts. A prompt
		// while a command is open means its D is late or lost: the command's output
		// ended here (see endOpenLocked).
		s.seenPrompt, s.atPrompt = true, true
		s.inputOff = off
		if s.cur != nil && !s.cur.prompted {
			s.cur.prompted, s.cur.promptAt = true, off
		}
	case markOutput:
		s.atPrompt = false
		s.forgetWaitingLocked() // sampled at the prompt; the command has not been seen reading yet
		if s.cur != nil && !s.cur.prompted && off == s.cur.Start && s.pending == nil {
			return // a duplicated C: nothing came between
		}
		if s.cur != nil { // a new command while the last one is open: its D was lost
			s.endOpenLocked(off, nil, NoteEndLost)
		}
		var b *Block
		switch {
		case s.pending != nil:
			b, s.pending = s.pending, nil
			b.Start, b.echoFrom = off, 0
		case s.fallback != nil:
			// Typed into the session's own shell while its marks were missing, and
			// the shell runs it with its hooks back: it is a shell block after all.
			b, s.fallback = s.fallback.block, nil
			b.Fallback, b.prompt, b.Start, b.echoFrom = false, false, off, 0
		default:
			b = s.newBlockLocked(s.typedCommandLocked(off), off)
			s.emitLocked(Event{Kind: EventBlockStarted, Block: b})
		}
		s.cur = b
	case markDone:
		s.forgetWaitingLocked() // the shell runs its prompt hooks now
		s.atPrompt = false
		code := m.code()
		s.shellStatus = code
		note := ""
		if code == nil {
			note = NoteMarkMixup
		}
		switch {
		case s.cur != nil && denied.is(s.cur):
			// The line's first command ran in a subshell, which the guard's
			// "no" skipped; the shell reports that subshell's status.
			s.endOpenLocked(off, nil, denied.note)
		case s.cur != nil:
			s.endOpenLocked(off, code, note)
			if s.fallback != nil { // e.g. input typed into `read x`
				s.finishBlockLocked(s.fallback.block, off, nil, NoteFallback)
				s.fallback = nil
			}
		case s.pending != nil:
			// A command ran but its C was lost (PS0 or preexec replaced): the code
			// is its own (D and N are never part of a prompt, so no redraw repeats
			// them), the output starts at the submission (echo trimmed).
			s.finishBlockLocked(s.pending, off, code, note)
			s.pending = nil
		case s.fallback != nil:
			s.finishBlockLocked(s.fallback.block, off, nil, s.fallbackNoteLocked())
			s.fallback = nil
		}
		// Otherwise a duplicated or stray D: it belongs to no open block.
	case markNoRun:
		s.forgetWaitingLocked()
		code := m.code()
		prev := s.shellStatus
		s.shellStatus = code
		switch {
		case s.cur != nil && denied.is(s.cur): // bash: the guard said no
			s.endOpenLocked(off, nil, denied.note)
		case s.cur != nil: // C said a command started, the shell says none did
			s.endOpenLocked(off, nil, NoteMarkMixup)
		case s.pending != nil && denied.is(s.pending): // zsh: the guard said no
			s.finishBlockLocked(s.pending, off, nil, denied.note)
			s.pending = nil
		case s.pending != nil:
			// The shell read the submitted line and ran nothing: a parse error,
			// an interrupted continuation (Ctrl-C at PS2), or nothing to run.
			// $? is what the shell made of the line.
			if nothingToRun(s.pending.Command) {
				s.finishBlockLocked(s.pending, off, nil, NoteNothing)
			} else {
				s.finishBlockLocked(s.pending, off, code, "")
			}
			s.pending = nil
		case s.fallback != nil:
			s.finishBlockLocked(s.fallback.block, off, nil, s.fallbackNoteLocked())
			s.fallback = nil
		case denied != nil && denied.block == 0 && s.atPrompt:
			// zsh: a line typed at the prompt that the guard denied; nothing ran.
			cmd := strings.TrimSpace(denied.line)
			b := s.newBlockLocked(cmd, s.inputOff)
			b.echoFrom = b.Start
			s.emitLocked(Event{Kind: EventBlockStarted, Block: b})
			s.finishBlockLocked(b, off, nil, denied.note)
		case code != nil && prev != nil && *code != *prev && *code != 130 && s.atPrompt:
			// A line a person typed that the shell rejected (it changed $? without
			// running anything; 130 is Ctrl-C at the prompt, which discards the line).
			if cmd := firstLine(s.typedCommandLocked(off)); cmd != "" {
				b := s.newBlockLocked(cmd, s.inputOff)
				b.echoFrom = b.Start
				s.emitLocked(Event{Kind: EventBlockStarted, Block: b})
				s.finishBlockLocked(b, off, code, "")
			}
		}
		s.atPrompt = false
	case markReprompt:
		if m.exit == s.lastReprompt {
			return // the line editor redrew the same prompt
		}
		s.lastReprompt = m.exit
		s.forgetWaitingLocked()
		switch {
		case s.cur != nil: // the prompt is back and our hook did not run: its D is lost
			s.endOpenLocked(off, nil, NoteEndLost)
		case s.pending != nil: // re-prompted without running the line or setting $?
			s.finishBlockLocked(s.pending, off, nil, NoteRejected)
			s.pending = nil
		case s.fallback != nil:
			s.finishBlockLocked(s.fallback.block, off, nil, s.fallbackNoteLocked())
			s.fallback = nil
		}
	case markCwd:
		// OSC 7 comes from our prompt hook, right after D or N.
		if m.cwd != s.cwd {
			s.cwd = m.cwd
			s.emitLocked(Event{Kind: EventCwd, Cwd: m.cwd})
		}
		if s.cur != nil { // a prompt without D: the command's end was lost
			s.endOpenLocked(off, nil, NoteEndLost)
		}
		if s.pending != nil { // submitted, and neither D nor N came
			s.finishBlockLocked(s.pending, off, nil, NoteEndLost)
			s.pending = nil
		}
		if s.fallback != nil { // the program we typed into gave the prompt back
			s.finishBlockLocked(s.fallback.block, off, nil, s.fallbackNoteLocked())
			s.fallback = nil
		}
	}
}

// code is a D or N mark's exit status, nil when it had none.
func (m mark) code() *int {
	if !m.hasExit {
		return nil
	}
	c := m.exit
	return &c
}

// endOpenLocked finishes the open shell block (s.cur) with code: at the prompt that
// already came back when there was one (a late D), else at off.
func (s *Session) endOpenLocked(off int64, code *int, note string) {
	b := s.cur
	s.cur = nil
	if note == NoteEndLost {
		s.lost = true // until the prompt hook sends D or N again
	}
	if b.prompted {
		off = b.promptAt
	}
	s.finishBlockLocked(b, off, code, note)
}

// fallbackNoteLocked says why a fallback block has no exit code.
func (s *Session) fallbackNoteLocked() string {
	if s.lost {
		return NoteLost
	}
	return NoteFallback
}

// nothingToRun reports whether a command has nothing a shell would run: only blank
// lines and comments.
func nothingToRun(command string) bool {
	for l := range strings.SplitSeq(command, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && l != "\\" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}

// altToggle is a switch to (on) or from the alternate screen at an output offset.
type altToggle struct {
	off int64
	on  bool
}

const maxAltToggles = 64

// altAtLocked reports whether the alternate screen is on just before offset off, as far
// as the recent switches tell (ok false when none is known before off).
func (s *Session) altAtLocked(off int64) (on, ok bool) {
	for i := len(s.alt) - 1; i >= 0; i-- {
		if s.alt[i].off < off {
			return s.alt[i].on, true
		}
	}
	return false, false
}

// newBlockLocked appends a running block starting at off.
func (s *Session) newBlockLocked(command string, off int64) *Block {
	b := &Block{
		N:         len(s.blocks) + 1,
		Command:   s.redactTextLocked(command),
		Cwd:       s.cwd,
		State:     BlockRunning,
		StartedAt: time.Now().UTC(),
		Start:     off,
		End:       off,
	}
	s.blocks = append(s.blocks, b)
	return b
}

// finishBlockLocked ends b at offset off with an exit code, or with none (nil) and a
// note that says why.
func (s *Session) finishBlockLocked(b *Block, off int64, code *int, note string) {
	if b.State == BlockDone {
		return
	}
	b.State, b.End, b.FinishedAt = BlockDone, max(off, b.Start), time.Now().UTC()
	if code != nil {
		c := *code
		b.ExitCode = &c
		s.lastExit = &c
	} else {
		b.Note = note
	}
	s.emitLocked(Event{Kind: EventBlockFinished, Block: b})
}

// typedCommandLocked recovers a command a person typed at the prompt from its echo
// between the last B mark and the C mark at off.
//
// The echo is rendered from the start of the prompt's line, and the prompt taken
// off again: a line editor that redraws the line (bash's bracketed paste: the
// pasted text, then CR and cursor moves over the prompt) moves by columns that
// count the prompt.
func (s *Session) typedCommandLocked(off int64) string {
	from := max(s.inputOff, s.ring.Start(), off-16<<10)
	if lineStart := s.lineStartLocked(from); lineStart < from {
		pa, pb := s.ring.Slices(lineStart, from)
		prompt, _ := renderText(s.rows, 0, pa, pb)
		a, b := s.ring.Slices(lineStart, off)
		text, _ := renderText(s.rows, 0, a, b)
		if cmd, ok := strings.CutPrefix(text, strings.TrimRight(prompt, " ")); ok {
			return strings.TrimSpace(cmd)
		}
	}
	a, b := s.ring.Slices(from, off)
	text, _ := renderText(s.rows, 0, a, b)
	return strings.TrimSpace(text)
}

// lineStartLocked is the offset after the last newline before off (at most 1 KiB
// back, and not before the ring's oldest byte); off itself when there is none.
func (s *Session) lineStartLocked(off int64) int64 {
	from := max(s.ring.Start(), off-1<<10)
	a, b := s.ring.Slices(from, off)
	buf := append(append([]byte(nil), a...), b...)
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		return from + int64(i) + 1
	}
	if from == 0 {
		return 0
	}
	return off
}

// updateStateLocked recomputes the state and records a change.
func (s *Session) updateStateLocked() {
	st := s.computeStateLocked()
	if st != s.state {
		s.state = st
		s.emitLocked(Event{Kind: EventState, State: st})
	}
	s.blockCheckpointLocked()
}

func (s *Session) computeStateLocked() State {
	switch {
	case s.exited || s.closed:
		return StateExited
	case s.guarding > 0: // the shell waits for the guard's answer about a line
		return StateRunning
	case s.integrated && s.cur == nil && s.fallback == nil && s.pending == nil && s.atPrompt && !s.guardAwait:
		return StateIdle
	case s.integrated && !s.seenPrompt && !s.waiting:
		return StateStarting
	case !s.integrated && !s.polled:
		return StateStarting
	case s.waiting && s.fallback == nil && (!s.integrated || !s.seenPrompt || s.cur != nil || s.pending != nil):
		// With integration, the shell reading between a command's end (D) and the
		// prompt mark (A) not yet read is the shell at its prompt: idle in a moment.
		// (Before the first prompt, an rc file may ask for input: a passphrase.)
		return StateWaitingInput
	}
	return StateRunning
}

// snapshotLocked copies a block, filling End for a running one.
func (s *Session) snapshotLocked(b *Block) Block {
	c := *b
	if c.State == BlockRunning {
		c.End = s.ring.End()
	}
	if b.ExitCode != nil {
		v := *b.ExitCode
		c.ExitCode = &v
	}
	return c
}

// Blocks returns all blocks, oldest first.
func (s *Session) Blocks() []Block {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Block, len(s.blocks))
	for i, b := range s.blocks {
		out[i] = s.snapshotLocked(b)
	}
	return out
}

// Block returns block n (1-based).
func (s *Session) Block(n int) (Block, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 1 || n > len(s.blocks) {
		return Block{}, ErrNoBlock
	}
	return s.snapshotLocked(s.blocks[n-1]), nil
}
