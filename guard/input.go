package guard

import (
	"context"
	"slices"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
)

// Typed text (the input and keys verbs) is checked as command lines, best effort.
//
// The guard follows what was typed since the last line end (the session's pending
// text), with a rough model of a line editor: backspace, C-u, C-w and C-c edit or
// clear it, escape sequences (arrows, function keys) are dropped. When input ends
// a line (CR or LF), the line is decided before any byte of that input is
// written; a denied line writes nothing.
//
// What the program in the foreground does with the bytes is unknown to the node:
// history recall, tab completion, a line editor's own keys or a program that
// builds commands from several lines all escape this check. It is a net for the
// obvious, not a sandbox.
//
//   - Without shell integration in the foreground (a program started as argv, a
//     REPL or a nested shell inside an integrated one, a command reading its
//     terminal), the check decides: deny refuses the input, approve holds it
//     until a person decides.
//   - At an integrated shell's prompt, the shell itself asks the node before the
//     line runs (Line), and decides for real, holding if needed. The guard then
//     only pre-checks for a deny (which it refuses at once, naming the rule);
//     allow and approve pass to the shell, so a line is never held twice.

// maxPending bounds the typed text a session's pending line keeps (the end of a
// longer line is kept).
const maxPending = 8 << 10

// checkInput decides the lines that req.Data completes in the session for
// req.Writer (see above). On nil the node calls TypedInput, then writes the data.
func (g *Guard) checkInput(ctx context.Context, req Request) error {
	s, w, data := req.Session, req.Writer, req.Data
	s.mu.Lock()
	lines, _ := editLine(s.pending, data)
	if len(lines) > 0 && len(s.pending) > 0 && (s.pendingMixed || s.pendingBy != w) {
		// The line this input ends holds text another writer typed (unless this
		// input clears it first): it would run, and be decided, as this writer's.
		if own, _ := editLine(nil, data); !slices.Equal(own, lines) {
			by := s.pendingBy
			s.mu.Unlock()
			who := "another writer"
			if by != (Writer{}) {
				who = by.Wire(false).Name()
			}
			return api.Errorf(api.CodeBusy, "the line typed in %s so far is %s's: this input would end it as yours; clear it first (Ctrl-U, keys [\"C-u\"]), or let them finish it", s.addr(), who)
		}
	}
	s.mu.Unlock()
	for _, line := range lines {
		if line == "" {
			continue
		}
		if !req.AtPrompt {
			if err := g.enforce(ctx, s, w, line, req.Held, req.Decision); err != nil {
				return err
			}
			continue
		}
		if err := g.precheck(ctx, s, w, line, req.Decision); err != nil {
			return err
		}
	}
	return nil
}

// TypedInput records data as typed by w into the session, right before the node
// writes it (the shell may ask about a line it ends at once): the pending line,
// whose it is, and the lines it ends follow it.
func (s *Session) TypedInput(w Writer, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := len(s.pending)
	lines, rest := editLine(s.pending, data)
	s.noteTypedLocked(w, data, lines)
	s.pending = rest
	switch {
	case len(rest) == 0:
		s.pendingBy, s.pendingMixed = Writer{}, false
	case before == 0 || len(lines) > 0: // a line begun by this input
		s.pendingBy, s.pendingMixed = w, false
	case s.pendingBy != w:
		s.pendingMixed = true
	}
}

// precheck refuses a line that the policy denies outright; anything else is left to
// the shell's own check (Line), which decides and holds.
func (g *Guard) precheck(ctx context.Context, s *Session, w Writer, line string, slot *Decision) error {
	if err := g.Loaded(ctx); err != nil {
		return err
	}
	d := g.decide(s, w, line, nil)
	if d.Action != api.ActionDeny {
		return nil
	}
	err := g.verdict(ctx, s, w, line, d, nil)
	slot.set(d)
	return err
}

// editLine applies typed bytes to a pending line: it returns the lines they end
// (CR or LF; in order) and the text pending after them. It models a line editor
// roughly: DEL and BS erase a character, C-u and C-c clear the line, C-w erases a
// word, escape sequences and other control characters are dropped. pending is
// not modified.
func editLine(pending, data []byte) (lines []string, rest []byte) {
	cur := append([]byte(nil), pending...)
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\r' || c == '\n':
			if c == '\n' && i > 0 && data[i-1] == '\r' {
				continue // CRLF ends one line
			}
			lines = append(lines, string(cur))
			cur = cur[:0]
		case c == 0x7f || c == '\b':
			if len(cur) > 0 {
				_, size := utf8.DecodeLastRune(cur)
				cur = cur[:len(cur)-size]
			}
		case c == 0x15 || c == 0x03: // C-u, C-c
			cur = cur[:0]
		case c == 0x17: // C-w: blanks, then the word before them
			for len(cur) > 0 && (cur[len(cur)-1] == ' ' || cur[len(cur)-1] == '\t') {
				cur = cur[:len(cur)-1]
			}
			for len(cur) > 0 && cur[len(cur)-1] != ' ' && cur[len(cur)-1] != '\t' {
				cur = cur[:len(cur)-1]
			}
		case c == 0x1b:
			i = skipEscape(data, i)
		case c == '\t':
			cur = append(cur, c)
		case c < 0x20:
			// other control characters do not type text
		default:
			cur = append(cur, c)
		}
	}
	if len(cur) > maxPending {
		cur = cur[len(cur)-maxPending:]
	}
	return lines, cur
}

// skipEscape returns the index of the last byte of the escape sequence that starts
// at data[i] (ESC): CSI (ESC [ … final byte), SS3 (ESC O x), or ESC and one byte.
func skipEscape(data []byte, i int) int {
	if i+1 >= len(data) {
		return i
	}
	switch data[i+1] {
	case '[':
		for j := i + 2; j < len(data); j++ {
			if data[j] >= 0x40 && data[j] <= 0x7e {
				return j
			}
		}
		return len(data) - 1
	case 'O':
		return min(i+2, len(data)-1)
	}
	return i + 1
}
