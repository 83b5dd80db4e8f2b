package session

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// This file turns a raw terminal output stream (what a program writes to its PTY) into the
// plain text a person would have seen, line by line, for consumption by AI agents.

// lineSink receives rendered lines in order. line is valid UTF-8, has no trailing newline and
// no trailing spaces; it is only valid during the call (copy it to keep it).
type lineSink interface{ line(line []byte) }

const (
	renderDefaultRows = 24
	// renderMaxCols bounds the width of a line so that hostile input (a huge cursor column, an
	// endless line without newline) cannot grow memory without bound. A line that reaches it is
	// hard-wrapped, as a terminal with autowrap would do.
	renderMaxCols = 8192
	// renderMaxParam saturates CSI numeric parameters.
	renderMaxParam = 1 << 20
	// renderMaxParams is how many CSI parameters are kept; the rest are ignored.
	renderMaxParams = 16
	// renderKeepCap is the largest line buffer (in cells) kept for reuse once it is cleared.
	renderKeepCap = 4096
)

// Parser states.
const (
	renderGround    = iota
	renderEsc       // after ESC
	renderEscInter  // ESC followed by intermediate bytes, waiting for the final byte
	renderCSI       // ESC [ ...
	renderString    // OSC, DCS, APC, PM, SOS content: swallowed, never buffered
	renderStringEsc // ESC seen inside a string: ESC \ terminates it
)

// renderScreen is one screen window: a ring of rows lines plus a cursor.
type renderScreen struct {
	lines              [][]rune // ring buffer of len rows; lines[(top+i)%rows] is row i
	top                int
	row, col           int
	savedRow, savedCol int
}

// textRenderer is a streaming terminal interpreter that emits finished lines to a lineSink.
//
// It models a window of rows lines with unlimited width (no wrapping, except that lines are
// hard-wrapped at renderMaxCols cells to bound memory) and a cursor. Every rune counts as one
// cell; LF is treated as CR LF. Lines scrolling off the top of the window are final and are
// passed to the sink at once; Close passes the remaining window. Absolute cursor addressing is
// relative to the window, so rows should be the PTY's row count. Text drawn on the alternate
// screen (vim, less, top) is discarded. Cursor movement, erasing, character and line
// insertion/deletion, scrolling and cursor save/restore (ESC 7/8, CSI s/u) are interpreted;
// other control sequences (SGR, modes, scroll regions...) are swallowed, and string sequences
// (OSC, DCS, APC, PM, SOS) are skipped without being buffered, so memory is bounded by the
// window (worst case rows*renderMaxCols*4 bytes, typically a few KiB) whatever the input.
//
// A textRenderer is not safe for concurrent use. Writes allocate only when a line buffer has to
// grow; line buffers and the emit buffer are reused. The sink is called synchronously from Write
// and Close.
type textRenderer struct {
	sink lineSink
	rows int

	main, alt renderScreen
	scr       *renderScreen // &main or &alt
	inAlt     bool

	state   uint8
	private byte // CSI private marker ('?', '>', '<', '=') or 0
	inter   bool // CSI has intermediate bytes
	np      int  // index of the CSI parameter being parsed
	params  [renderMaxParams]int

	pend  [utf8.UTFMax]byte // incomplete UTF-8 sequence at the end of the last Write
	npend int

	out []byte // emit buffer
}

// newTextRenderer returns a renderer with a window of rows lines (rows<1 means 24) that sends
// finished lines to sink.
func newTextRenderer(rows int, sink lineSink) *textRenderer {
	if rows < 1 {
		rows = renderDefaultRows
	}
	r := &textRenderer{sink: sink, rows: rows}
	r.main.lines = make([][]rune, rows)
	r.scr = &r.main
	return r
}

// Write interprets p. It never fails and always returns len(p), nil. p may be split anywhere,
// including inside UTF-8 sequences and escape sequences.
func (r *textRenderer) Write(p []byte) (int, error) {
	n := len(p)
	if r.npend > 0 {
		p = r.finishPending(p)
	}
	i := 0
	for i < len(p) {
		c := p[i]
		switch r.state {
		case renderGround:
			switch {
			case c >= 0x20 && c < 0x7f:
				j := i + 1 + renderPrintableRun(p[i+1:])
				r.putASCII(p[i:j])
				i = j
			case c == 0x1b:
				r.state = renderEsc
				i++
			case c < 0x80:
				r.execute(c)
				i++
			case !utf8.FullRune(p[i:]):
				r.npend = copy(r.pend[:], p[i:])
				return n, nil
			default:
				ru, size := utf8.DecodeRune(p[i:])
				r.putRune(ru)
				i += size
			}
			continue

		case renderEsc, renderEscInter, renderCSI:
			switch {
			case c >= 0x20 && c < 0x7f:
				r.seqByte(c)
			case c >= 0x80: // not part of a sequence: abort it, reprocess in ground
				r.state = renderGround
				continue
			case c == 0x1b: // restart
				r.state = renderEsc
			case c == 0x18 || c == 0x1a: // CAN, SUB: abort
				r.state = renderGround
			case c < 0x20: // C0 controls inside sequences are executed
				r.execute(c)
			}

		case renderString: // skip the content; only BEL, ESC, CAN and SUB matter
			k := bytes.IndexAny(p[i:], "\x07\x1b\x18\x1a")
			if k < 0 {
				return n, nil
			}
			i += k
			r.state = renderGround
			if p[i] == 0x1b {
				r.state = renderStringEsc
			}

		case renderStringEsc:
			// ESC \ ends the string; another sequence aborts it (as a VT500 parser does).
			r.state = renderEsc
			if c != '\\' {
				continue
			}
			r.state = renderGround
		}
		i++
	}
	return n, nil
}

// renderPrintableRun returns the length of the run of printable ASCII bytes (0x20-0x7e) at the
// start of p, testing 8 bytes at a time.
func renderPrintableRun(p []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		// A byte is below 0x20, or above 0x7e (which includes >= 0x80).
		if ((x-0x20*lo)&^x|(x+(0x7f-0x7e)*lo)|x)&hi != 0 {
			break
		}
	}
	for i < len(p) && p[i] >= 0x20 && p[i] < 0x7f {
		i++
	}
	return i
}

// finishPending completes the UTF-8 sequence left incomplete by the previous Write, using the
// first bytes of p, and returns the unconsumed rest of p.
func (r *textRenderer) finishPending(p []byte) []byte {
	for r.npend > 0 {
		var buf [utf8.UTFMax]byte
		k := copy(buf[:], r.pend[:r.npend])
		m := copy(buf[k:], p)
		if !utf8.FullRune(buf[:k+m]) {
			// Still incomplete: p is entirely part of the sequence.
			r.npend += copy(r.pend[r.npend:], p)
			return nil
		}
		ru, size := utf8.DecodeRune(buf[:k+m])
		r.putRune(ru)
		if size >= k {
			p = p[size-k:]
			r.npend = 0
		} else {
			// Invalid sequence: the remaining pending bytes are decoded again on their own.
			r.npend = copy(r.pend[:], r.pend[size:r.npend])
		}
	}
	return p
}

// execute performs a C0 control (other than ESC).
func (r *textRenderer) execute(c byte) {
	s := r.scr
	switch c {
	case '\n', 0x0b, 0x0c:
		// PTY output normally has onlcr; a bare LF from a program means newline.
		s.col = 0
		r.index()
	case '\r':
		s.col = 0
	case '\b':
		if s.col > 0 {
			s.col = min(s.col, renderMaxCols) - 1
		}
	case '\t':
		r.tab(1)
	}
	// BEL, NUL, SO, SI, CAN, SUB, DEL and the other controls are ignored.
}

func (r *textRenderer) tab(n int) {
	s := r.scr
	s.col = min((s.col/8+n)*8, renderMaxCols-1)
}

// seqByte handles a byte in 0x20-0x7e in the escape, escape-intermediate and CSI states.
func (r *textRenderer) seqByte(c byte) {
	switch r.state {
	case renderEscInter:
		if c >= 0x30 {
			r.state = renderGround // final byte: swallowed
		}
	case renderCSI:
		switch {
		case c >= '0' && c <= '9':
			if r.np < renderMaxParams {
				r.params[r.np] = min(r.params[r.np]*10+int(c-'0'), renderMaxParam)
			}
		case c == ';' || c == ':':
			r.np = min(r.np+1, renderMaxParams)
		case c >= '<' && c <= '?':
			if r.private == 0 {
				r.private = c
			}
		case c < 0x30:
			r.inter = true
		case c >= 0x40:
			r.state = renderGround
			if !r.inter {
				r.csiDispatch(c)
			}
		}
	default: // renderEsc
		r.escByte(c)
	}
}

// escByte handles the byte after ESC.
func (r *textRenderer) escByte(c byte) {
	s := r.scr
	r.state = renderGround
	switch c {
	case '[':
		r.state = renderCSI
		r.private, r.inter, r.np = 0, false, 0
		r.params = [renderMaxParams]int{}
	case ']', 'P', 'X', '^', '_':
		r.state = renderString
	case '7':
		s.savedRow, s.savedCol = s.row, s.col
	case '8':
		s.row, s.col = s.savedRow, s.savedCol
	case 'M': // reverse index
		if s.row == 0 {
			r.scrollDown(1)
		} else {
			s.row--
		}
	case 'D': // index
		r.index()
	case 'E': // next line
		s.col = 0
		r.index()
	case 'c': // full reset
		r.setAlt(false)
		r.eraseRows(0, r.rows)
		r.main.row, r.main.col, r.main.savedRow, r.main.savedCol = 0, 0, 0, 0
	default:
		if c < 0x30 {
			r.state = renderEscInter
		}
		// Other final bytes (charset selection, keypad modes, ESC \ ...) are swallowed.
	}
}

// param returns CSI parameter i, or def when it is missing or 0.
func (r *textRenderer) param(i, def int) int {
	if i > r.np || i >= renderMaxParams || r.params[i] == 0 {
		return def
	}
	return r.params[i]
}

// csiDispatch executes a complete CSI sequence with final byte f.
func (r *textRenderer) csiDispatch(f byte) {
	s := r.scr
	if r.private != 0 {
		if r.private == '?' && (f == 'h' || f == 'l') {
			for i := 0; i <= r.np && i < renderMaxParams; i++ {
				switch r.params[i] {
				case 1049, 1047, 47:
					r.setAlt(f == 'h')
				}
			}
		}
		return
	}
	maxRow, maxCol := r.rows-1, renderMaxCols-1
	n := r.param(0, 1)
	switch f {
	case 'A':
		s.row = max(s.row-n, 0)
	case 'B', 'e':
		s.row = min(s.row+n, maxRow)
	case 'C', 'a':
		s.col = min(s.col+n, maxCol)
	case 'D':
		s.col = max(min(s.col, maxCol+1)-n, 0)
	case 'E':
		s.row, s.col = min(s.row+n, maxRow), 0
	case 'F':
		s.row, s.col = max(s.row-n, 0), 0
	case 'G', '`':
		s.col = min(n-1, maxCol)
	case 'H', 'f':
		s.row = min(n-1, maxRow)
		s.col = min(r.param(1, 1)-1, maxCol)
	case 'd':
		s.row = min(n-1, maxRow)
	case 'I':
		r.tab(n)
	case 'Z':
		s.col = max((min(s.col, maxCol)+7)/8-n, 0) * 8
	case 'J':
		switch r.param(0, 0) {
		case 0:
			r.eraseLine(s.col, renderMaxCols)
			r.eraseRows(s.row+1, r.rows)
		case 1:
			r.eraseRows(0, s.row)
			r.eraseLine(0, s.col+1)
		case 2, 3:
			r.eraseRows(0, r.rows)
		}
	case 'K':
		switch r.param(0, 0) {
		case 0:
			r.eraseLine(s.col, renderMaxCols)
		case 1:
			r.eraseLine(0, s.col+1)
		case 2:
			r.eraseLine(0, renderMaxCols)
		}
	case 'X':
		r.eraseLine(s.col, s.col+n)
	case 'P': // delete chars, shifting the rest of the line left
		if lp := s.linePtr(s.row); s.col < len(*lp) {
			l := *lp
			n = min(n, len(l)-s.col)
			copy(l[s.col:], l[s.col+n:])
			*lp = l[:len(l)-n]
		}
	case '@': // insert blanks, shifting the rest of the line right (cells beyond the limit are lost)
		if l := *s.linePtr(s.row); s.col < len(l) {
			col, old := s.col, len(l)
			n = min(n, renderMaxCols-col)
			s.col = old
			r.cells(min(old+n, renderMaxCols) - old) // grow the line
			s.col = col
			l = *s.linePtr(s.row)
			copy(l[col+n:], l[col:old])
			for i := range n {
				l[col+i] = ' '
			}
		}
	case 'L': // insert lines: the bottom ones are lost
		n = min(n, r.rows-s.row)
		for i := r.rows - 1; i >= s.row+n; i-- {
			a, b := s.linePtr(i), s.linePtr(i-n)
			*a, *b = *b, *a
		}
		r.eraseRows(s.row, s.row+n)
		s.col = 0
	case 'M': // delete lines, pulling blank lines in at the bottom
		n = min(n, r.rows-s.row)
		for i := s.row; i < r.rows-n; i++ {
			a, b := s.linePtr(i), s.linePtr(i+n)
			*a, *b = *b, *a
		}
		r.eraseRows(r.rows-n, r.rows)
		s.col = 0
	case 'S':
		r.scrollUp(min(n, r.rows))
	case 'T':
		r.scrollDown(min(n, r.rows))
	case 's':
		if r.np == 0 && r.params[0] == 0 {
			s.savedRow, s.savedCol = s.row, s.col
		}
	case 'u':
		s.row, s.col = s.savedRow, s.savedCol
	}
	// Everything else (SGR, modes, scroll regions, reports...) is swallowed.
}

// linePtr returns the line at window row i of the current screen.
func (s *renderScreen) linePtr(i int) *[]rune {
	return &s.lines[(s.top+i)%len(s.lines)]
}

// renderBlank returns l emptied, dropping its buffer when it is large.
func renderBlank(l []rune) []rune {
	if cap(l) > renderKeepCap {
		return nil
	}
	return l[:0]
}

// cells makes room for n cells at the cursor (padding with spaces), advances the cursor past
// them and returns them for writing. n must not exceed renderMaxCols-col.
func (r *textRenderer) cells(n int) []rune {
	s := r.scr
	lp := s.linePtr(s.row)
	l := *lp
	col, end := s.col, s.col+n
	if end > len(l) {
		old := len(l)
		if end > cap(l) {
			nl := make([]rune, end, min(max(2*cap(l), end, 64), renderMaxCols))
			copy(nl, l)
			l = nl
		} else {
			l = l[:end]
		}
		for i := old; i < col; i++ {
			l[i] = ' '
		}
		*lp = l
	}
	s.col = end
	return l[col:end]
}

// putASCII writes a run of printable ASCII bytes at the cursor.
func (r *textRenderer) putASCII(b []byte) {
	s := r.scr
	for len(b) > 0 {
		r.wrap()
		n := min(len(b), renderMaxCols-s.col)
		dst, src := r.cells(n), b[:n]
		i := 0
		for ; i+8 <= n; i += 8 {
			d, c := dst[i:i+8:i+8], src[i:i+8:i+8]
			d[0], d[1], d[2], d[3] = rune(c[0]), rune(c[1]), rune(c[2]), rune(c[3])
			d[4], d[5], d[6], d[7] = rune(c[4]), rune(c[5]), rune(c[6]), rune(c[7])
		}
		for ; i < n; i++ {
			dst[i] = rune(src[i])
		}
		b = b[n:]
	}
}

// putRune writes one decoded rune at the cursor. Controls (C0, DEL, C1) are ignored.
func (r *textRenderer) putRune(c rune) {
	if c < 0x20 || (c >= 0x7f && c < 0xa0) {
		return
	}
	r.wrap()
	r.cells(1)[0] = c
}

// wrap moves the cursor to the start of the next line when the line is full.
func (r *textRenderer) wrap() {
	if r.scr.col >= renderMaxCols {
		r.scr.col = 0
		r.index()
	}
}

// index moves the cursor down one row, scrolling the window up at the bottom.
func (r *textRenderer) index() {
	s := r.scr
	if s.row < r.rows-1 {
		s.row++
	} else {
		r.scrollUp(1)
	}
}

// scrollUp scrolls the window up n lines (n <= rows); lines leaving the top of the main screen
// are emitted.
func (r *textRenderer) scrollUp(n int) {
	s := r.scr
	for range n {
		l := &s.lines[s.top]
		if !r.inAlt {
			r.emit(*l)
		}
		*l = renderBlank(*l)
		s.top = (s.top + 1) % r.rows
	}
}

// scrollDown scrolls the window down n lines (n <= rows); lines leaving the bottom are lost.
func (r *textRenderer) scrollDown(n int) {
	s := r.scr
	for range n {
		s.top = (s.top + r.rows - 1) % r.rows
		s.lines[s.top] = renderBlank(s.lines[s.top])
	}
}

// eraseRows blanks window rows [from, to).
func (r *textRenderer) eraseRows(from, to int) {
	s := r.scr
	for i := from; i < to; i++ {
		lp := s.linePtr(i)
		*lp = renderBlank(*lp)
	}
}

// eraseLine blanks cells [from, to) of the cursor row.
func (r *textRenderer) eraseLine(from, to int) {
	s := r.scr
	lp := s.linePtr(s.row)
	l := *lp
	if from >= len(l) {
		return
	}
	if to >= len(l) {
		*lp = l[:from]
		return
	}
	for i := from; i < to; i++ {
		l[i] = ' '
	}
}

// setAlt switches to a blank alternate screen (the main screen is kept aside untouched) or
// back to the main screen, discarding the alternate one.
func (r *textRenderer) setAlt(on bool) {
	if r.inAlt == on {
		return
	}
	if r.alt.lines == nil {
		r.alt.lines = make([][]rune, r.rows)
	}
	r.inAlt = on
	r.scr = &r.alt
	r.eraseRows(0, r.rows) // blank on entry, discarded on exit
	if on {
		r.alt.row, r.alt.col, r.alt.savedRow, r.alt.savedCol = r.main.row, r.main.col, 0, 0
	} else {
		r.scr = &r.main
	}
}

// emit sends l, trailing spaces trimmed and encoded as UTF-8, to the sink.
func (r *textRenderer) emit(l []rune) {
	n := len(l)
	for n > 0 && l[n-1] == ' ' {
		n--
	}
	l = l[:n]
	out := r.out
	if cap(out) < n {
		out = make([]byte, 0, max(n+n/4, 128))
	}
	// ASCII fast path, then the general encoder from the first non-ASCII rune on.
	out = out[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		c, o := l[i:i+8:i+8], out[i:i+8:i+8]
		if c[0]|c[1]|c[2]|c[3]|c[4]|c[5]|c[6]|c[7] >= utf8.RuneSelf {
			break
		}
		o[0], o[1], o[2], o[3] = byte(c[0]), byte(c[1]), byte(c[2]), byte(c[3])
		o[4], o[5], o[6], o[7] = byte(c[4]), byte(c[5]), byte(c[6]), byte(c[7])
	}
	for ; i < n; i++ {
		c := l[i]
		if c >= utf8.RuneSelf {
			break
		}
		out[i] = byte(c)
	}
	out = out[:i]
	for _, c := range l[i:] {
		out = utf8.AppendRune(out, c)
	}
	r.sink.line(out)
	if cap(out) > 4*renderKeepCap {
		out = nil
	}
	r.out = out
}

// Close flushes the renderer: an incomplete trailing UTF-8 sequence becomes U+FFFD, the
// alternate screen (if active) is discarded, and the main window is emitted top to bottom
// without its trailing empty lines. The renderer is then reset to an empty window and may be
// reused; a second Close emits nothing.
func (r *textRenderer) Close() {
	for range r.npend {
		r.putRune(utf8.RuneError)
	}
	r.npend = 0
	r.state = renderGround
	r.setAlt(false)
	s := &r.main
	last := -1
	for i := range r.rows {
		for _, c := range *s.linePtr(i) {
			if c != ' ' {
				last = i
				break
			}
		}
	}
	for i := 0; i <= last; i++ {
		r.emit(*s.linePtr(i))
	}
	r.eraseRows(0, r.rows)
	s.top, s.row, s.col, s.savedRow, s.savedCol = 0, 0, 0, 0, 0
}
