package policy

import (
	"bytes"
	"sort"
)

// Terminal control sequences are transparent to redaction: a secret is matched on
// the text a terminal shows, so one drawn with sequences between its characters
// (zsh redrawing a pasted line a character at a time, grep --color marking the part
// that matched) is still found. Transparent are CSI sequences (ESC [ parameters
// final, colours and cursor moves) and the short ESC sequences (ESC =, ESC ( B);
// OSC strings (titles, hyperlinks) are text: a secret in a title is found there.
// A replaced secret keeps the control sequences that were inside it, after the
// marker, so the terminal ends in the state the program meant.

// maxEscape bounds a transparent sequence: a longer candidate is text (its ESC too),
// so the bytes held back for an unfinished one stay few.
const maxEscape = 64

// escapeLen looks at b, which starts with ESC. It returns the length of a
// transparent sequence (n > 0), or 0 when b is not one (the ESC is text), and whole
// false when b may still become one.
func escapeLen(b []byte) (n int, whole bool) {
	if len(b) < 2 {
		return 0, false
	}
	// A sequence goes on with bytes in [more, moreHi] and ends with one in [final, 0x7e].
	var more, moreHi, final byte
	switch c := b[1]; {
	case c == '[': // CSI: parameters and intermediates, then a final byte
		more, moreHi, final = 0x20, 0x3f, 0x40
	case c >= 0x20 && c <= 0x2f: // intermediates, then a final byte (ESC ( B)
		more, moreHi, final = 0x20, 0x2f, 0x30
	case c >= 0x30 && c <= 0x7e && c != ']' && c != 'P' && c != 'X' && c != '^' && c != '_':
		return 2, true // ESC = , ESC 7, ESC M …; OSC, DCS, SOS, PM, APC are text
	default:
		return 0, true
	}
	for k := 2; k < len(b) && k < maxEscape; k++ {
		switch x := b[k]; {
		case x >= final && x <= 0x7e:
			return k + 1, true
		case x < more || x > moreHi:
			return 0, true
		}
	}
	if len(b) >= maxEscape {
		return 0, true
	}
	return 0, false
}

// gap is one transparent sequence: buf[from:to], before visible byte at.
type gap struct {
	at, from, to int
	shift        int // the bytes of this gap and all before it
}

// projection is what a terminal shows of buf: vis, the visible bytes, and the gaps
// left out. cut is where an unfinished sequence starts (len(buf) when none, or when
// the stream ends: then it is text).
type projection struct {
	vis  []byte
	gaps []gap
	cut  int
}

// project splits buf into visible bytes and transparent sequences. Without an ESC
// in buf, vis is buf itself; otherwise vis and gaps reuse scratch's memory when it
// is given (pooled: they must not outlive the caller's use).
func project(buf []byte, final bool, scratch *machine) projection {
	if bytes.IndexByte(buf, 0x1b) < 0 {
		return projection{vis: buf, cut: len(buf)}
	}
	pr := projection{cut: len(buf)}
	if scratch != nil {
		pr.vis, pr.gaps = scratch.vis[:0], scratch.gaps[:0]
		defer func() { scratch.vis, scratch.gaps = pr.vis[:0], pr.gaps[:0] }()
	}
	shift := 0
	for i := 0; ; {
		j := bytes.IndexByte(buf[i:], 0x1b)
		if j < 0 {
			pr.vis = append(pr.vis, buf[i:]...)
			return pr
		}
		j += i
		pr.vis = append(pr.vis, buf[i:j]...)
		n, whole := escapeLen(buf[j:])
		switch {
		case !whole && !final:
			pr.cut = j
			return pr
		case n == 0: // text, or unfinished at the end of the stream
			pr.vis = append(pr.vis, 0x1b)
			i = j + 1
		default:
			shift += n
			pr.gaps = append(pr.gaps, gap{at: len(pr.vis), from: j, to: j + n, shift: shift})
			i = j + n
		}
	}
}

// orig is the index in buf of visible byte v (the gaps before it come first);
// orig(len(vis)) is cut.
func (pr *projection) orig(v int) int {
	k := sort.Search(len(pr.gaps), func(i int) bool { return pr.gaps[i].at > v })
	if k == 0 {
		return v
	}
	return v + pr.gaps[k-1].shift
}

// inside appends to out the transparent sequences of buf between visible bytes s
// and e-1 (those inside a match [s, e)).
func (pr *projection) inside(out, buf []byte, s, e int) []byte {
	k := sort.Search(len(pr.gaps), func(i int) bool { return pr.gaps[i].at > s })
	for ; k < len(pr.gaps) && pr.gaps[k].at < e; k++ {
		out = append(out, buf[pr.gaps[k].from:pr.gaps[k].to]...)
	}
	return out
}
