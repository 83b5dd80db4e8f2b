package session

import (
	"strconv"
	"unicode/utf8"
)

// textBudget is a lineSink that keeps the whole text when it fits in max bytes, otherwise the
// head and tail of it, and counts what it left out.
//
// The text is the received lines joined with "\n" (no trailing newline); trailing empty lines
// are not part of it. Lines are expected to be valid UTF-8 without '\n' (as a textRenderer
// emits them). When the text exceeds max bytes, result returns
//
//	head + "\n[... N bytes omitted ...]\n" + tail
//
// where head is a prefix and tail a suffix of the text, each at most max/2 bytes. Each is cut at
// a line boundary when at least one whole line fits (as many whole lines as fit), and otherwise
// inside the line at a UTF-8 rune boundary. N is exactly len(text)-len(head)-len(tail).
//
// Memory is O(max) whatever the input length: the first max bytes are kept until the text
// overflows, then the head plus a buffer of 2*(max/2+1) bytes for the tail; line copies its
// argument and does not allocate per line. result allocates the returned string. A textBudget
// is not safe for concurrent use.
type textBudget struct {
	max, half int
	total     int64 // bytes of text so far (deferred empty lines excluded)
	lines     int64 // lines in the text so far
	empty     int64 // empty lines received but not yet part of the text
	lastLen   int   // length of the last line of the text
	over      bool  // total > max: head is final, tail is tracked
	head      []byte
	tail      []byte // holds the last min(total, half+1) bytes of the text at its end
}

var budgetNewline = []byte{'\n'}

// newTextBudget returns a budget of max bytes; max<=0 means unlimited.
func newTextBudget(max int) *textBudget {
	if max < 0 {
		max = 0
	}
	return &textBudget{max: max, half: max / 2}
}

// line appends l as the next line of the text.
func (b *textBudget) line(l []byte) {
	if len(l) == 0 {
		b.empty++ // deferred: dropped if only empty lines follow
		return
	}
	for ; b.empty > 0; b.empty-- {
		if b.lines > 0 {
			b.write(budgetNewline)
		}
		b.lines++
	}
	if b.lines > 0 {
		b.write(budgetNewline)
	}
	b.lines++
	b.write(l)
	b.lastLen = len(l)
}

// write appends p to the text.
func (b *textBudget) write(p []byte) {
	b.total += int64(len(p))
	if !b.over {
		if b.max == 0 {
			b.head = append(b.head, p...)
			return
		}
		room := b.max - len(b.head)
		if len(p) <= room {
			b.headAppend(p)
			return
		}
		b.headAppend(p[:room])
		p = p[room:]
		b.over = true
		b.tail = make([]byte, 0, 2*(b.half+1))
		b.tailAppend(b.head)
		b.head = append([]byte(nil), b.head[:budgetCutHead(b.head, b.half)]...)
	}
	b.tailAppend(p)
}

// headAppend appends p (at most max-len(head) bytes) to head without growing it beyond max.
func (b *textBudget) headAppend(p []byte) {
	if n := len(b.head) + len(p); n > cap(b.head) {
		h := make([]byte, len(b.head), min(b.max, max(2*cap(b.head), n, 256)))
		copy(h, b.head)
		b.head = h
	}
	b.head = append(b.head, p...)
}

// tailAppend appends p to the tail buffer, keeping only the last half+1 bytes of the text once
// the buffer would exceed twice that.
func (b *textBudget) tailAppend(p []byte) {
	keep := b.half + 1
	if len(p) > keep {
		p = p[len(p)-keep:]
	}
	if len(b.tail)+len(p) > 2*keep {
		k := keep - len(p)
		b.tail = b.tail[:copy(b.tail, b.tail[len(b.tail)-k:])]
	}
	b.tail = append(b.tail, p...)
}

// budgetCutHead returns the length of the head of text (of which at least half+1 bytes are
// given): the longest run of whole lines of at most half bytes, or, when the first line is
// longer than that, half bytes backed off to a rune boundary.
func budgetCutHead(text []byte, half int) int {
	for j := min(half, len(text)-1); j >= 0; j-- {
		if text[j] == '\n' {
			return j
		}
	}
	j := min(half, len(text))
	for j > 0 && j < len(text) && !utf8.RuneStart(text[j]) {
		j--
	}
	return j
}

// result returns the text, or its head and tail around an omission marker, and the number of
// bytes of the text left out. It may be called at any time and does not change b.
func (b *textBudget) result() (text string, omitted int64) {
	if !b.over {
		return string(b.head), 0
	}
	w := b.tail[len(b.tail)-min(len(b.tail), b.half+1):]
	n := len(w)
	var i int
	if b.lastLen <= b.half {
		// Whole lines fit: start at the earliest line start leaving at most half bytes.
		i = n - b.lastLen
		for k := max(n-b.half, 1); k < i; k++ {
			if w[k-1] == '\n' {
				i = k
				break
			}
		}
	} else {
		i = n - b.half
		for i < n && !utf8.RuneStart(w[i]) {
			i++
		}
	}
	tail := w[i:]
	omitted = b.total - int64(len(b.head)) - int64(len(tail))
	buf := make([]byte, 0, len(b.head)+len(tail)+40)
	buf = append(buf, b.head...)
	buf = append(buf, "\n[... "...)
	buf = strconv.AppendInt(buf, omitted, 10)
	buf = append(buf, " bytes omitted ...]\n"...)
	buf = append(buf, tail...)
	return string(buf), omitted
}

// renderText renders chunks of terminal output through a textRenderer with a window of rows
// lines into a textBudget of max bytes and returns its result.
func renderText(rows, max int, chunks ...[]byte) (text string, omitted int64) {
	b := newTextBudget(max)
	r := newTextRenderer(rows, b)
	for _, c := range chunks {
		r.Write(c)
	}
	r.Close()
	return b.result()
}
