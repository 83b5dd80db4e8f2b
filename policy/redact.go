package policy

import (
	"bytes"
	"fmt"
	"regexp"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// Bounds of redact patterns. A streaming redactor must hold back the tail of what it
// has seen while a secret may still start there, so every pattern has a bounded
// longest match: unbounded repeats (*, +, {n,}) are capped at RepeatCap more
// repetitions, and a pattern whose longest match is still over MaxMatchBytes is
// refused.
const (
	RepeatCap     = 256
	MaxMatchBytes = 4096
)

// Redact is one compiled redact pattern.
type Redact struct {
	Name    string
	Pattern string // as written
	re      *regexp.Regexp
	max     int    // longest match in bytes
	prefix  []byte // what every match starts with ("" when no literal does)
	lv      *liveness
}

// NewRedact compiles a redact pattern (RE2). It refuses patterns that match the empty
// string, that use anchors or word boundaries (a stream has no fixed start or end, and
// a match must not depend on bytes around it), and whose longest match, with
// unbounded repeats capped at RepeatCap, exceeds MaxMatchBytes. A pattern that starts
// with a literal (AKIA…) is found by a fast substring search; one that does not costs
// a regexp step on every byte of output.
func NewRedact(name, pattern string) (Redact, error) {
	fail := func(format string, args ...any) (Redact, error) {
		return Redact{}, fmt.Errorf("redact %q: %w", name, fmt.Errorf(format, args...))
	}
	if len(pattern) > MaxPatternBytes {
		return fail("pattern has %d bytes, more than %d", len(pattern), MaxPatternBytes)
	}
	tree, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return fail("bad regexp: %v", err)
	}
	if err := capRepeats(tree); err != nil {
		return fail("%v", err)
	}
	bounded := tree.String()
	re, err := regexp.Compile(bounded)
	if err != nil {
		return fail("bad regexp once repeats are capped at %d: %v", RepeatCap, err)
	}
	if re.MatchString("") {
		return fail("pattern matches the empty string")
	}
	n := maxBytes(tree)
	if n > MaxMatchBytes {
		return fail("pattern can match more than %d bytes (unbounded repeats count %d)", MaxMatchBytes, RepeatCap)
	}
	// The program regexp runs is compiled from the same text (Parse, Simplify,
	// Compile), so liveness and matching agree.
	again, err := syntax.Parse(bounded, syntax.Perl)
	if err != nil {
		return fail("bad regexp once repeats are capped at %d: %v", RepeatCap, err)
	}
	lv, err := newLiveness(again)
	if err != nil {
		return fail("bad regexp once repeats are capped at %d: %v", RepeatCap, err)
	}
	prefix, _ := re.LiteralPrefix()
	return Redact{Name: name, Pattern: pattern, re: re, max: n, prefix: []byte(prefix), lv: lv}, nil
}

// find returns the leftmost match in buf, as regexp.FindIndex. A pattern with a
// literal prefix is looked for with bytes.Index first: most output has no match,
// and the regexp would clear its state for the whole buffer before it looks.
func (p *Redact) find(buf []byte) []int {
	k := 0
	if len(p.prefix) > 0 {
		if k = bytes.Index(buf, p.prefix); k < 0 {
			return nil
		}
	}
	m := p.re.FindIndex(buf[k:])
	if m != nil {
		m[0], m[1] = m[0]+k, m[1]+k
	}
	return m
}

// capRepeats bounds every unbounded repeat in place and refuses empty-width
// assertions.
func capRepeats(re *syntax.Regexp) error {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return fmt.Errorf("anchors and word boundaries (^ $ \\A \\z \\b \\B) are not supported in redact patterns")
	case syntax.OpStar:
		re.Op, re.Min, re.Max = syntax.OpRepeat, 0, RepeatCap
	case syntax.OpPlus:
		re.Op, re.Min, re.Max = syntax.OpRepeat, 1, RepeatCap
	case syntax.OpRepeat:
		if re.Max < 0 {
			re.Max = re.Min + RepeatCap
		}
	}
	for _, s := range re.Sub {
		if err := capRepeats(s); err != nil {
			return err
		}
	}
	return nil
}

// maxBytes is an upper bound, in bytes of input, of what re matches; re has no
// unbounded repeat. A character counts the longest UTF-8 encoding it may match (an
// invalid byte, read as utf8.RuneError, is one byte).
func maxBytes(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			n += runeBytes(r, re.Flags&syntax.FoldCase != 0)
		}
		return n
	case syntax.OpCharClass:
		n := 0
		for i := 1; i < len(re.Rune); i += 2 {
			n = max(n, runeBytes(re.Rune[i], false)) // encodings grow with the rune
		}
		return n
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return utf8.UTFMax
	case syntax.OpCapture, syntax.OpQuest:
		return maxBytes(re.Sub[0])
	case syntax.OpRepeat:
		return min(re.Max*maxBytes(re.Sub[0]), MaxMatchBytes+1)
	case syntax.OpConcat:
		n := 0
		for _, s := range re.Sub {
			n = min(n+maxBytes(s), MaxMatchBytes+1)
		}
		return n
	case syntax.OpAlternate:
		n := 0
		for _, s := range re.Sub {
			n = max(n, maxBytes(s))
		}
		return n
	}
	return 0 // empty match, no match
}

// runeBytes is the length of r's encoding, or with fold the longest of its fold
// orbit's (k matches the 3-byte Kelvin sign); a surrogate, which regexp never
// reads, counts 3.
func runeBytes(r rune, fold bool) int {
	n := utf8.RuneLen(r)
	if n < 0 {
		n = 3
	}
	if fold {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			n = max(n, runeBytes(f, false))
		}
	}
	return n
}

// Redactor replaces matches of redact patterns in a stream with "[REDACTED:name]".
// Feeding a stream in any chunks gives the same output as feeding it at once: Write
// holds back only the tail where a match may still start (a partial match is alive,
// see live.go), at most the longest match any pattern can have (MaxMatchBytes), and
// releases everything before it; Flush, at the end of the stream (or after a quiet
// spell: the caller's choice), releases the rest, deciding matches on what was seen.
// Where matches of several patterns overlap, the leftmost wins, then the pattern
// listed first. It is not safe for concurrent use: one per stream (Text aside).
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
	r.held = append([]byte(nil), buf[hold:]...)
	if len(r.held) == 0 {
		r.held = nil
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
	out = append(out, r.held[pos:]...)
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

// replace appends buf to out with the matches that are final replaced, up to the end
// of the last of them, and returns where it stopped and where the live tail starts
// (len(buf) when final: the stream ends with buf). out stays nil until a match is
// replaced. Each pattern is searched on its own (a literal prefix makes that fast),
// which finds the same matches as one regexp of all patterns as alternatives:
// leftmost first, then the first pattern.
func (r *Redactor) replace(out, buf []byte, final bool) ([]byte, int, int) {
	hold := len(buf)
	var vm *machine
	if !final {
		vm = machines.Get().(*machine)
		defer machines.Put(vm)
		hold = r.live(buf, 0, vm)
	}
	for i := range r.pats {
		r.next[i] = r.pats[i].find(buf)
	}
	pos := 0
	for {
		best := -1
		for i, m := range r.next {
			if m != nil && (best < 0 || m[0] < r.next[best][0]) {
				best = i
			}
		}
		if best < 0 || r.next[best][0] >= hold {
			return out, pos, max(hold, pos)
		}
		s, e := r.next[best][0], r.next[best][1]
		if out == nil {
			out = make([]byte, 0, len(buf)+32)
		}
		out = append(out, buf[pos:s]...)
		out = append(out, "[REDACTED:"...)
		out = append(out, r.pats[best].Name...)
		out = append(out, ']')
		pos = e
		if pos > hold {
			hold = r.live(buf, pos, vm)
		}
		for i, m := range r.next {
			if m != nil && m[0] < pos {
				r.next[i] = nil
				if m := r.pats[i].find(buf[pos:]); m != nil {
					r.next[i] = []int{pos + m[0], pos + m[1]}
				}
			}
		}
	}
}

// live is the earliest position at or after from where a match of any pattern may
// still start, or len(buf).
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
