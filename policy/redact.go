package policy

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

// Bounds of redact patterns. A streaming redactor must hold back the tail of what it
// has seen until it knows no secret starts there, so every pattern has a bounded
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
	max     int // longest match in bytes
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
	n := maxLen(tree)
	if n > MaxMatchBytes {
		return fail("pattern can match %d bytes, more than %d", n, MaxMatchBytes)
	}
	return Redact{Name: name, Pattern: pattern, re: re, max: n}, nil
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

// maxLen is an upper bound, in bytes, of what re matches; re has no unbounded repeat.
// Every character counts utf8.UTFMax bytes, so that a match is only decided once each
// rune it may read is whole in the buffer.
func maxLen(re *syntax.Regexp) int {
	return maxRunes(re) * utf8.UTFMax
}

func maxRunes(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune)
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1
	case syntax.OpCapture, syntax.OpQuest:
		return maxRunes(re.Sub[0])
	case syntax.OpRepeat:
		return min(re.Max*maxRunes(re.Sub[0]), MaxMatchBytes+1)
	case syntax.OpConcat:
		n := 0
		for _, s := range re.Sub {
			n = min(n+maxRunes(s), MaxMatchBytes+1)
		}
		return n
	case syntax.OpAlternate:
		n := 0
		for _, s := range re.Sub {
			n = max(n, maxRunes(s))
		}
		return n
	}
	return 0 // empty match, no match
}

// Redactor replaces matches of redact patterns in a stream with "[REDACTED:name]".
// Feeding a stream in any chunks gives the same output as feeding it at once: a match
// is only replaced once the bytes that could extend it have been seen, so Write holds
// back less than the longest match any pattern can have (at most MaxMatchBytes-1
// bytes), and Flush, at the end of the stream, releases them. Where matches of
// several patterns overlap, the leftmost wins, then the pattern listed first. It is
// not safe for concurrent use: one per stream.
type Redactor struct {
	pats []Redact
	max  int     // longest match of any pattern
	held []byte  // the tail not yet released; len(held) < max
	next [][]int // per pattern, its next match in the buffer being scanned
}

// NewRedactor returns a redactor for patterns; with none it passes bytes through.
func NewRedactor(patterns []Redact) *Redactor {
	r := &Redactor{pats: patterns, next: make([][]int, len(patterns))}
	for _, p := range patterns {
		r.max = max(r.max, p.max)
	}
	return r
}

// NewRedactor returns a redactor for the policy's patterns; a nil policy redacts
// nothing.
func (p *Policy) NewRedactor() *Redactor {
	if p == nil {
		return NewRedactor(nil)
	}
	return NewRedactor(p.Redacts)
}

// Write takes the next bytes of the stream and returns what may be released, redacted.
// The result does not alias p; it may be empty while bytes are held back.
func (r *Redactor) Write(p []byte) []byte {
	if len(r.pats) == 0 {
		return append([]byte(nil), p...)
	}
	buf := append(r.held, p...)
	// A match starting at s is final once s+max <= len(buf): no later byte can
	// change it, nor whether one starts there.
	limit := len(buf) - r.max // last start position that is final
	out, pos := r.replace(make([]byte, 0, len(buf)), buf, limit)
	cut := max(pos, limit+1)
	out = append(out, buf[pos:cut]...)
	r.held = append(r.held[:0:0], buf[cut:]...)
	return out
}

// Flush ends the stream: it returns the held-back bytes, redacted.
func (r *Redactor) Flush() []byte {
	if len(r.pats) == 0 {
		return nil
	}
	out, pos := r.replace(nil, r.held, len(r.held))
	out = append(out, r.held[pos:]...)
	r.held = nil
	return out
}

// replace appends buf to out with the matches starting at or before limit replaced,
// up to the end of the last of them, and returns where it stopped. Each pattern is
// searched on its own (a literal prefix makes that fast), which finds the same
// matches as one regexp of all patterns as alternatives: leftmost first, then the
// first pattern.
func (r *Redactor) replace(out, buf []byte, limit int) ([]byte, int) {
	for i, p := range r.pats {
		r.next[i] = p.re.FindIndex(buf)
	}
	pos := 0
	for {
		best := -1
		for i, m := range r.next {
			if m != nil && (best < 0 || m[0] < r.next[best][0]) {
				best = i
			}
		}
		if best < 0 || r.next[best][0] > limit {
			return out, pos
		}
		s, e := r.next[best][0], r.next[best][1]
		out = append(out, buf[pos:s]...)
		out = append(out, "[REDACTED:"...)
		out = append(out, r.pats[best].Name...)
		out = append(out, ']')
		pos = e
		for i, m := range r.next {
			if m != nil && m[0] < pos {
				r.next[i] = nil
				if m := r.pats[i].re.FindIndex(buf[pos:]); m != nil {
					r.next[i] = []int{pos + m[0], pos + m[1]}
				}
			}
		}
	}
}
