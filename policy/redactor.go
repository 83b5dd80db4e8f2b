package policy

// MaxHeld bounds what a Redactor holds back. Only control sequences inside a
// partial match can make the tail longer than MaxMatchBytes (a program that prints
// "AKIA" and then colour codes without end); past MaxHeld the tail is released as
// Flush releases it, a new stream starting after it.
const MaxHeld = 4 * MaxMatchBytes

// Redactor replaces matches of redact patterns in a stream with "[REDACTED:name]".
// Patterns match the text a terminal shows: control sequences between characters
// are skipped (escape.go). Feeding a stream in any chunks gives the same output as
// feeding it at once: Write holds back only the tail where a match may still start
// (a partial match is alive, see live.go; or a control sequence is unfinished), at
// most the longest match any pattern can have (MaxMatchBytes) and the control
// sequences inside it, and releases everything before it; Flush, at the end of the
// stream (or after a quiet spell: the caller's choice), releases the rest, deciding
// matches on what was seen. Where matches of several patterns overlap, the leftmost
// wins, then the pattern listed first. It is not safe for concurrent use: one per
// stream (Text aside).
type Redactor struct {
	pats []Redact
	held []byte  // the tail not yet released
	next [][]int // per pattern, its next match in the buffer being scanned
}

// NewRedactor returns a redactor for patterns; with none it passes bytes through.
func NewRedactor(patterns []Redact) *Redactor {
	return &Redactor{pats: patterns, next: make([][]int, len(patterns))}
}

// NewRedactor returns a redactor for the policy's patterns; a nil policy redacts
// nothing.
func (p *Policy) NewRedactor() *Redactor {
	if p == nil {
		return NewRedactor(nil)
	}
	return NewRedactor(p.Redacts)
}

// RedactText returns s with the policy's redact patterns replaced, as a stream of
// its own (for a command line in an audit record); a nil policy returns s.
func (p *Policy) RedactText(s string) string {
	if p == nil || len(p.Redacts) == 0 {
		return s
	}
	return NewRedactor(p.Redacts).Text(s)
}

// Write takes the next bytes of the stream and returns what may be released,
// redacted. The result may alias p or memory of the redactor's: it is valid until
// the next call and while p is unchanged. It may be empty while bytes are held back.
// Without patterns it is a copy of p.
func (r *Redactor) Write(p []byte) []byte {
	if len(r.pats) == 0 {
		return append([]byte(nil), p...)
	}
	buf := p
	if len(r.held) > 0 {
		buf = append(r.held, p...) // r.held is replaced below
	}
	out, pos, hold := r.replace(nil, buf, false)
	if out == nil {
		out = buf[:hold] // nothing replaced: the released bytes as they are
	} else {
		out = append(out, buf[pos:hold]...)
	}
	r.held = nil
	if hold < len(buf) {
		r.held = append([]byte(nil), buf[hold:]...)
	}
	if len(r.held) > MaxHeld {
		// Control sequences keep a partial match alive: decide on what was seen.
		out = append(out[:len(out):len(out)], r.Flush()...)
	}
	return out
}

// Flush ends the stream: it returns the held-back bytes, redacted, and the
// redactor starts a new stream.
func (r *Redactor) Flush() []byte {
	if len(r.held) == 0 {
		return nil
	}
	out, pos, _ := r.replace(nil, r.held, true)
	if out == nil {
		out = r.held
	} else {
		out = append(out, r.held[pos:]...)
	}
	r.held = nil
	return out
}

// Held is how many bytes Write holds back now.
func (r *Redactor) Held() int { return len(r.held) }

// Text returns s redacted as a stream of its own, leaving r's stream as it is. It
// is safe to call concurrently with itself (not with Write or Flush).
func (r *Redactor) Text(s string) string {
	if len(r.pats) == 0 || s == "" {
		return s
	}
	t := Redactor{pats: r.pats, next: make([][]int, len(r.pats))}
	out, pos, _ := t.replace(nil, []byte(s), true)
	if out == nil {
		return s
	}
	return string(append(out, s[pos:]...))
}

// replace appends buf to out with the matches that are final replaced, up to the
// end of the last of them, and returns where it stopped and where the held tail
// starts (len(buf) when final: the stream ends with buf). out stays nil until a
// match is replaced. Matching runs on the visible bytes; each pattern is searched
// on its own (a literal prefix makes that fast), which finds the same matches as one
// regexp of all patterns as alternatives: leftmost first, then the first pattern.
func (r *Redactor) replace(out, buf []byte, final bool) ([]byte, int, int) {
	vm := machines.Get().(*machine)
	defer machines.Put(vm)
	pr := project(buf, final, vm)
	vis := pr.vis
	hold := len(vis)
	if !final {
		hold = r.live(vis, 0, vm)
	}
	for i := range r.pats {
		r.next[i] = r.pats[i].find(vis)
	}
	pos := 0 // in buf
	for {
		best := -1
		for i, m := range r.next {
			if m != nil && (best < 0 || m[0] < r.next[best][0]) {
				best = i
			}
		}
		if best < 0 || r.next[best][0] >= hold {
			return out, pos, max(pr.orig(hold), pos)
		}
		s, e := r.next[best][0], r.next[best][1]
		if out == nil {
			out = make([]byte, 0, len(buf)+32)
		}
		out = append(out, buf[pos:pr.orig(s)]...)
		out = append(out, "[REDACTED:"...)
		out = append(out, r.pats[best].Name...)
		out = append(out, ']')
		out = pr.inside(out, buf, s, e)
		pos = pr.orig(e-1) + 1
		if e > hold {
			hold = r.live(vis, e, vm)
		}
		for i, m := range r.next {
			if m != nil && m[0] < e {
				r.next[i] = nil
				if m := r.pats[i].find(vis[e:]); m != nil {
					r.next[i] = []int{e + m[0], e + m[1]}
				}
			}
		}
	}
}

// live is the earliest position at or after from where a match of any pattern may
// still start, or where a rune cut by the end starts, or len(buf).
func (r *Redactor) live(buf []byte, from int, m *machine) int {
	end := cutRune(buf, from)
	best := end
	for _, p := range r.pats {
		if end-p.max >= best {
			continue // this pattern's live starts would all be later
		}
		best = min(best, p.lv.live(buf, from, p.max, m))
	}
	return best
}
