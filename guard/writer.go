package guard

import (
	"slices"
	"strings"
	"time"
)

// Who typed a line the shell asks about. The shell reports the line it is about
// to run; the guard attributes it to a writer only when that writer's input
// formed it, never to whoever holds the writer lease: a program in the session
// can type into its terminal (TIOCSTI, or a process writing to the PTY master it
// got some other way), and a line it planted while a person typed would run, and
// be approved, as that person's. A line is the writer W's when, among the lines
// writers' input ended (TypedInput, oldest first):
//
//   - one of W's lines is that text (blanks around it aside); or
//   - W's consecutive lines hold the very characters of it, in any order, blanks
//     and ';' aside (a line edited with cursor moves, C-a, or typed over several
//     continuation lines); or
//   - W's line holds completion keys (Tab) and its text, cut at them, appears in
//     order in the line, starting it (the shell completed words W began); or
//   - W's line holds other editing keys (arrows: the history) and the line is one
//     that was W's before.
//
// Any other line is no writer's: decided as UnknownWriter (denied under a
// policy). That covers text the shell's editor makes up from elsewhere (another
// writer's history entry, a search) too: typed out again, it runs. A line is
// used once; lines older than the one used (typed into a program, never asked
// about) are dropped, and none is kept beyond typedFor or maxTyped.

// typedLine is a line a writer's input ended.
type typedLine struct {
	w     Writer
	text  string // as editLine models it
	edits editKeys
	at    time.Time
}

// editKeys are the keys a pending line holds that editLine does not model.
type editKeys struct {
	tab   bool // completion
	other bool // escape sequences (arrows, history, alt keys), other control keys
}

const (
	// typedFor and maxTyped bound the lines kept for attribution.
	typedFor = 10 * time.Minute
	maxTyped = 32
	// maxPlanters bounds the principals kept as having run something.
	maxPlanters = 16
)

// noteTypedLocked records the lines data ends for w, and the editing keys of the
// line it leaves pending. s.mu is held; lines are editLine's for the same data.
func (s *Session) noteTypedLocked(w Writer, data []byte, lines []string) {
	now := time.Now()
	k := 0
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\r' || c == '\n':
			if c == '\n' && i > 0 && data[i-1] == '\r' {
				continue
			}
			if k < len(lines) {
				s.typed = append(s.typed, typedLine{w: w, text: lines[k], edits: s.pendingEdits, at: now})
				k++
			}
			s.pendingEdits = editKeys{}
		case c == '\t':
			s.pendingEdits.tab = true
		case c == 0x1b:
			s.pendingEdits.other = true
			i = skipEscape(data, i)
		case c < 0x20 && c != '\b' && c != 0x15 && c != 0x03 && c != 0x17:
			s.pendingEdits.other = true
		}
	}
	s.trimTypedLocked(now)
}

func (s *Session) trimTypedLocked(now time.Time) {
	drop := 0
	for drop < len(s.typed) && (now.Sub(s.typed[drop].at) > typedFor || len(s.typed)-drop > maxTyped) {
		drop++
	}
	s.typed = slices.Delete(s.typed, 0, drop)
}

// LineWriter is the writer whose input formed line (see above); the zero Writer
// when no writer's did. The lines it used are used up. piece: line is a command
// the shell runs while no line is accepted (an expansion, a completion), which
// may be a piece of the line being typed; a line the shell accepted never is
// (a program could wipe the pending line and type a part of it: a person's
// half-typed `echo "later: touch x"` would make its planted `touch x` theirs).
func (s *Session) LineWriter(line string, piece bool) Writer {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trimTypedLocked(time.Now())
	want := normLine(line)
	for i, c := range s.typed {
		j, ok := s.explainsLocked(i, want)
		if !ok {
			continue
		}
		s.typed = slices.Delete(s.typed, 0, j+1)
		s.asked = append(s.asked, typedLine{w: c.w, text: want, at: c.at})
		if len(s.asked) > maxTyped {
			s.asked = slices.Delete(s.asked, 0, len(s.asked)-maxTyped)
		}
		return c.w
	}
	// A command the shell runs before a line is accepted (an expansion, a
	// completion) is a piece of the line being typed: its writer's, when that
	// writer alone typed it so far.
	if piece && want != "" && !s.pendingMixed && s.pendingBy != (Writer{}) && strings.Contains(string(s.pending), want) {
		return s.pendingBy
	}
	return Writer{}
}

// explainsLocked reports whether the typed lines from i on (one writer's,
// consecutive) formed want, and the last one used.
func (s *Session) explainsLocked(i int, want string) (int, bool) {
	c := s.typed[i]
	if normLine(c.text) == want {
		return i, true
	}
	wantChars := charsOf(want)
	var text strings.Builder
	for j := i; j < len(s.typed) && j < i+8 && s.typed[j].w == c.w; j++ {
		text.WriteString(s.typed[j].text)
		if got := charsOf(text.String()); got == wantChars {
			return j, true
		} else if len(got) > len(wantChars) {
			break
		}
	}
	if c.edits.tab && completes(c.text, want) {
		return i, true
	}
	if c.edits.other {
		for _, a := range s.asked {
			if a.w == c.w && a.text == want {
				return i, true
			}
		}
	}
	return 0, false
}

// charsOf is s's characters in order of value, blanks and ';' aside: two texts
// with equal charsOf hold the same characters.
func charsOf(s string) string {
	b := []byte(s)
	b = slices.DeleteFunc(b, func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ';' })
	slices.Sort(b)
	return string(b)
}

// completes reports whether want is typed, cut at its Tabs, with words completed:
// each piece appears in want, in order, the first one starting it.
func completes(typed, want string) bool {
	pieces := strings.Split(typed, "\t")
	rest := want
	for k, p := range pieces {
		if k == 0 {
			if !strings.HasPrefix(rest, strings.TrimLeft(p, " ")) {
				return false
			}
			rest = rest[len(strings.TrimLeft(p, " ")):]
			continue
		}
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// notePlanter records that w ran something in the session.
func (s *Session) notePlanter(w Writer) {
	who := w.Principal
	if who == "" {
		who = w.Actor
	}
	if who == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.planters, who); i >= 0 {
		s.planters = slices.Delete(s.planters, i, i+1)
	}
	s.planters = append(s.planters, who)
	if len(s.planters) > maxPlanters {
		s.planters = slices.Delete(s.planters, 0, len(s.planters)-maxPlanters)
	}
}

// Started records that w started the session's program (a create with argv).
func (s *Session) Started(w Writer) { s.notePlanter(w) }

// plantersBut are the principals who ran something in the session, but who.
func (s *Session) plantersBut(who string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(s.planters), func(p string) bool { return p == who })
}
