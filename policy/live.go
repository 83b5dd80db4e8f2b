package policy

import (
	"bytes"
	"regexp/syntax"
	"sync"
	"unicode/utf8"
)

// What a streaming redactor must hold back: only the tail of the stream where a
// match could still start. A start position s is "live" when some pattern could
// match a string that begins with the bytes from s to the end of what was seen
// (a partial match is alive): the bytes before the earliest live position are
// final, since no later byte can change a match that starts there, nor whether one
// does. Finding live positions runs the pattern's compiled program (regexp/syntax)
// over the tail as a Thompson NFA with one thread per program counter, each
// remembering the earliest start that reached it, so one pass over the tail gives
// the earliest live start. Only the last maxBytes-1 bytes can hold one (a longer
// partial match would exceed the longest match), and a start can only be at a
// byte that begins a match, which the first-byte table and, for a pattern with a
// fixed first byte, bytes.IndexByte find fast: a stream of text with no secret in
// it costs a few table lookups per write.
//
// Positions are rune boundaries as regexp sees them (a byte below 0x80 or an
// invalid byte is one rune, a valid UTF-8 sequence is one), so that the redactor
// decides the same runes whatever the chunking: a rune cut by the end of a write
// counts as live when a thread is alive before it or a match can start with it.

// liveness is a pattern's compiled program and what can start a match.
type liveness struct {
	prog  *syntax.Prog
	start [256]bool // bytes that can begin a match (at a rune boundary)
	first int       // the only byte that can begin a match, or -1
}

func newLiveness(tree *syntax.Regexp) (*liveness, error) {
	prog, err := syntax.Compile(tree.Simplify())
	if err != nil {
		return nil, err
	}
	lv := &liveness{prog: prog, first: -1}
	var firsts []*syntax.Inst
	seen := make([]bool, len(prog.Inst))
	var walk func(pc uint32)
	walk = func(pc uint32) {
		if seen[pc] {
			return
		}
		seen[pc] = true
		in := &prog.Inst[pc]
		switch in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			walk(in.Out)
			walk(in.Arg)
		case syntax.InstCapture, syntax.InstNop, syntax.InstEmptyWidth:
			walk(in.Out)
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			firsts = append(firsts, in)
		}
	}
	walk(uint32(prog.Start))
	n := 0
	for c := range 256 {
		for _, in := range firsts {
			if startsWith(in, byte(c)) {
				lv.start[c] = true
				lv.first = c
				n++
				break
			}
		}
	}
	if n != 1 {
		lv.first = -1
	}
	return lv, nil
}

// startsWith reports whether a rune beginning with byte c may match in: exactly
// for ASCII, conservatively above (a lead byte may begin any rune of its range, an
// invalid byte reads as utf8.RuneError).
func startsWith(in *syntax.Inst, c byte) bool {
	if c < utf8.RuneSelf {
		return matchRune(in, rune(c))
	}
	switch in.Op {
	case syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
		return true
	case syntax.InstRune1:
		return in.Rune[0] >= utf8.RuneSelf
	}
	if len(in.Rune) == 1 { // a folded literal: its fold orbit may leave ASCII (k, K)
		return true
	}
	for i := 1; i < len(in.Rune); i += 2 {
		if in.Rune[i] >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

func matchRune(in *syntax.Inst, r rune) bool {
	switch in.Op {
	case syntax.InstRune1:
		return r == in.Rune[0]
	case syntax.InstRune:
		return in.MatchRune(r)
	case syntax.InstRuneAny:
		return true
	case syntax.InstRuneAnyNotNL:
		return r != '\n'
	}
	return false
}

// thread is one NFA thread: a program counter and the earliest start reaching it.
type thread struct {
	pc    uint32
	start int
}

// queue is a sparse set of threads, in the order they were added.
type queue struct {
	sparse []uint32
	dense  []thread
}

func (q *queue) reset(n int) {
	if cap(q.sparse) < n {
		q.sparse = make([]uint32, n)
	}
	q.sparse = q.sparse[:n]
	q.dense = q.dense[:0]
}

func (q *queue) has(pc uint32) bool {
	i := q.sparse[pc]
	return int(i) < len(q.dense) && q.dense[i].pc == pc
}

// machine is the scratch space of a liveness run; pooled, so a redactor per
// session costs no memory for it.
type machine struct {
	a, b queue
	vis  []byte // projection scratch (escape.go)
	gaps []gap
}

var machines = sync.Pool{New: func() any { return new(machine) }}

// add puts pc and what it reaches without reading a rune into q, with start. The
// threads of a queue are added in order of their starts (earliest first), so the
// first thread to reach a pc has the earliest start.
func (lv *liveness) add(q *queue, pc uint32, start int) {
	if q.has(pc) {
		return
	}
	q.sparse[pc] = uint32(len(q.dense))
	q.dense = append(q.dense, thread{pc, start})
	in := &lv.prog.Inst[pc]
	switch in.Op {
	case syntax.InstAlt, syntax.InstAltMatch:
		lv.add(q, in.Out, start)
		lv.add(q, in.Arg, start)
	case syntax.InstCapture, syntax.InstNop, syntax.InstEmptyWidth:
		// NewRedact refuses empty-width assertions; passing one is conservative.
		lv.add(q, in.Out, start)
	}
}

// alive returns the earliest start of a thread that waits for a rune, or -1.
func (lv *liveness) alive(q *queue) int {
	best := -1
	for _, t := range q.dense {
		switch lv.prog.Inst[t.pc].Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			if best < 0 || t.start < best {
				best = t.start
			}
		}
	}
	return best
}

// live returns the earliest live start in buf[from:] for a pattern whose matches
// are at most maxBytes long, or len(buf) when there is none; from must be a rune
// boundary. A UTF-8 sequence cut by the end of buf is always held (it is at most
// utf8.UTFMax-1 bytes): until it is whole, where the next rune starts is unknown.
func (lv *liveness) live(buf []byte, from, maxBytes int, m *machine) int {
	end := cutRune(buf, from)
	i := max(from, end-maxBytes)
	for i < end && !boundary(buf, from, i) {
		i++
	}
	size := len(lv.prog.Inst)
	cur, nxt := &m.a, &m.b
	cur.reset(size)
	nxt.reset(size)
	for i < end {
		if len(cur.dense) == 0 {
			// No partial match: skip to the next byte that can begin one.
			j := lv.nextStart(buf[:end], i)
			for j < end && !boundary(buf, from, j) {
				j = lv.nextStart(buf[:end], j+1)
			}
			if j >= end {
				return end
			}
			i = j
		}
		if lv.start[buf[i]] {
			lv.add(cur, uint32(lv.prog.Start), i)
		}
		r, w := utf8.DecodeRune(buf[i:end])
		nxt.dense = nxt.dense[:0]
		for _, t := range cur.dense {
			if in := &lv.prog.Inst[t.pc]; matchRune(in, r) {
				lv.add(nxt, in.Out, t.start)
			}
		}
		cur, nxt = nxt, cur
		i += w
	}
	if a := lv.alive(cur); a >= 0 {
		return a
	}
	return end
}

// cutRune returns where a UTF-8 sequence cut by the end of buf starts (at or after
// from), or len(buf) when the last rune is whole.
func cutRune(buf []byte, from int) int {
	n := len(buf)
	for k := 1; k < utf8.UTFMax && n-k >= from; k++ {
		if utf8.RuneStart(buf[n-k]) {
			if !utf8.FullRune(buf[n-k:]) {
				return n - k
			}
			break
		}
	}
	return n
}

// nextStart is the first index at or after i whose byte can begin a match, or
// len(buf).
func (lv *liveness) nextStart(buf []byte, i int) int {
	if i >= len(buf) {
		return len(buf)
	}
	if lv.first >= 0 {
		if j := bytes.IndexByte(buf[i:], byte(lv.first)); j >= 0 {
			return i + j
		}
		return len(buf)
	}
	for ; i < len(buf); i++ {
		if lv.start[buf[i]] {
			return i
		}
	}
	return i
}

// boundary reports whether i starts a rune when buf is decoded from the rune
// boundary from, as regexp decodes it: every byte that is not a continuation byte
// does; a continuation byte does unless a valid sequence begun by the lead byte
// before it (within utf8.UTFMax-1 bytes, at or after from) covers it.
func boundary(buf []byte, from, i int) bool {
	if i <= from || i >= len(buf) || utf8.RuneStart(buf[i]) {
		return true
	}
	for l := i - 1; l >= from && l >= i-(utf8.UTFMax-1); l-- {
		if utf8.RuneStart(buf[l]) {
			r, w := utf8.DecodeRune(buf[l:])
			return (r == utf8.RuneError && w == 1) || l+w <= i
		}
	}
	return true
}
