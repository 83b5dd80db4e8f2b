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
