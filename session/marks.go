package session

import (
	"bytes"
	"crypto/subtle"
	"net/url"
	"strconv"
	"strings"
)

// Shell integration marks.
//
// The shell integration writes OSC 133 (A prompt start, B prompt end, C command output
// start, D;<exit> command done, N;<status> back at the prompt without having run a
// command: the line was rejected, interrupted or empty) and OSC 7 (working directory) sequences, each carrying the
// session's nonce right after the OSC number:
//
//	ESC ] 133 ; fm=<nonce> ; A BEL
//	ESC ] 133 ; fm=<nonce> ; D ; 130 BEL
//	ESC ] 7 ; fm=<nonce> ; file://host/path BEL
//
// Only sequences with the exact nonce are marks: they are removed from the output stream
// and acted upon. Everything else — including OSC 133 sequences without a nonce or with a
// wrong one — is plain program output and stays in the stream untouched, so no program
// can forge the end of a block or its exit code.
//
// A sequence that starts as a mark, nonce and all, but is malformed (an ESC other than
// ST's inside it, no terminator within maxMarkLen bytes, or the end of the stream before
// its terminator) is dropped, never passed on: the nonce must not reach the output that
// viewers, logs and recordings read. When it is too long, everything up to its
// terminator goes. The shells percent-encode the cwd in OSC 7 so that none of its bytes
// can end a mark early; parseCwdMark decodes it.

// markKind is the kind of a shell integration mark.
type markKind byte

const (
	markPrompt   markKind = 'A' // prompt starts
	markInput    markKind = 'B' // prompt ends, command input starts
	markOutput   markKind = 'C' // command accepted, its output starts
	markDone     markKind = 'D' // command finished, with its exit code
	markNoRun    markKind = 'N' // back at the prompt and no command ran since the last one, with $?
	markReprompt markKind = 'R' // bash: a new prompt (numbered) with no prompt hook run before it
	markCwd      markKind = 'P' // working directory (OSC 7)
	markMode     markKind = 'M' // a terminal mode the program set (kept in the output)
	markInvalid  markKind = 0
)

// mark is one parsed shell integration mark.
type mark struct {
	kind    markKind
	exit    int  // markDone: the exit code
	hasExit bool // markDone: exit is valid
	cwd     string
	mode    int  // markMode: the private mode number (2004, 1049, 1047, 47)
	on      bool // markMode: set (h) or reset (l)
}

// maxMarkLen bounds how long a candidate mark may be before it is treated as plain
// output. A cwd can be long, so this is generous; output is held back only while a
// candidate is incomplete.
const maxMarkLen = 8192

// Tracked sequences: terminal modes whose state the session needs (bracketed paste for
// typing commands, the alternate screen for the screen model). They stay in the output
// stream; the scanner reports them as markMode marks at their offset.
var trackedModes = []struct {
	seq  []byte
	mode int
	on   bool
}{
	{[]byte("\x1b[?2004h"), 2004, true}, {[]byte("\x1b[?2004l"), 2004, false},
	{[]byte("\x1b[?1049h"), 1049, true}, {[]byte("\x1b[?1049l"), 1049, false},
	{[]byte("\x1b[?1047h"), 1047, true}, {[]byte("\x1b[?1047l"), 1047, false},
	{[]byte("\x1b[?47h"), 47, true}, {[]byte("\x1b[?47l"), 47, false},
}

// markScanner splits a raw PTY byte stream into plain output and marks. It is a
// streaming parser: a mark (or tracked sequence) split across two reads is held back
// until it completes, so the output it emits never contains a partial mark. Not safe
// for concurrent use; the session read loop owns it.
type markScanner struct {
	osc133 []byte // "\x1b]133;fm=<nonce>;"
	osc7   []byte // "\x1b]7;fm=<nonce>;"
	nonce  []byte
	pend   []byte // held-back bytes that may start a mark
	buf    []byte // scratch for pend+p
	skip   bool   // dropping the rest of an overlong mark, up to its terminator
}

func newMarkScanner(nonce string) *markScanner {
	return &markScanner{
		osc133: []byte("\x1b]133;fm="),
		osc7:   []byte("\x1b]7;fm="),
		nonce:  []byte(nonce),
	}
}

// scan consumes p. It calls out with runs of plain output and mk with each mark, in
// stream order. The slices given to out are only valid during the call.
func (m *markScanner) scan(p []byte, out func([]byte), mk func(mark)) {
	data := p
	if len(m.pend) > 0 {
		m.buf = append(append(m.buf[:0], m.pend...), p...)
		m.pend = m.pend[:0]
		data = m.buf
	}
	start := 0 // first byte not yet emitted
	i := 0
	for {
		if m.skip {
			// The rest of an overlong mark: drop it through BEL or ST; any other
			// ESC ends it and is scanned as usual.
			k := bytes.IndexAny(data[i:], "\a\x1b")
			if k < 0 {
				return
			}
			k += i
			switch {
			case data[k] == 0x07:
				i = k + 1
			case k+1 == len(data):
				m.pend = append(m.pend, 0x1b) // maybe ST split across reads
				return
			case data[k+1] == '\\':
				i = k + 2
			default:
				i = k
			}
			m.skip = false
			start = i
		}
		j := bytes.IndexByte(data[i:], 0x1b)
		if j < 0 {
			break
		}
		j += i
		rest := data[j:]
		n, mrk, hold := m.match(rest)
		if n < 0 { // a tracked mode: report it at its offset, keep it in the output
			if j > start {
				out(data[start:j])
			}
			mk(mrk)
			start, i = j, j-n
			continue
		}
		if hold {
			if j > start {
				out(data[start:j])
			}
			m.pend = append(m.pend, rest...)
			return
		}
		if n == 0 { // not a mark: plain output
			i = j + 1
			continue
		}
		if j > start {
			out(data[start:j])
		}
		if mrk.kind != markInvalid {
			mk(mrk)
		}
		i = j + n
		start = i
	}
	if start < len(data) {
		out(data[start:])
	}
}

// flush emits whatever is held back as plain output (at end of stream), except an
// unterminated mark with the nonce, which is dropped.
func (m *markScanner) flush(out func([]byte)) {
	if len(m.pend) > 0 && !m.skip && !m.ours(m.pend, len(m.pend)) {
		out(m.pend)
	}
	m.pend = m.pend[:0]
	m.skip = false
}

// ours reports whether b[:n] (b starts with ESC) is a mark's prefix followed by the
// whole nonce: "ESC ] 133 ; fm=<nonce>" or OSC 7's. The nonce is compared in constant
// time.
func (m *markScanner) ours(b []byte, n int) bool {
	if m.osc133 == nil {
		return false
	}
	var body []byte
	switch {
	case bytes.HasPrefix(b, m.osc133):
		body = b[len(m.osc133):n]
	case bytes.HasPrefix(b, m.osc7):
		body = b[len(m.osc7):n]
	default:
		return false
	}
	nl := len(m.nonce)
	return nl > 0 && len(body) >= nl && subtle.ConstantTimeCompare(body[:nl], m.nonce) == 1
}

// match looks at b, which starts with ESC. It returns the length of a complete mark to
// remove (with the parsed mark, kind markInvalid for a nonce-bearing sequence it does
// not understand or that is malformed: an ESC inside, removed up to that ESC, or too
// long, removed through maxMarkLen with the rest skipped), or n == 0 when b is not a
// mark, or hold when b is an incomplete prefix that may still become a mark or a
// tracked sequence, or n < 0 (minus its length) for a tracked mode sequence that stays
// in the output. Whether a candidate is held does not depend on the nonce.
func (m *markScanner) match(b []byte) (n int, mk mark, hold bool) {
	if len(b) > 1 && b[1] == '[' {
		for _, t := range trackedModes {
			if bytes.HasPrefix(b, t.seq) {
				return -len(t.seq), mark{kind: markMode, mode: t.mode, on: t.on}, false
			}
			if len(b) < len(t.seq) && bytes.HasPrefix(t.seq, b) {
				return 0, mark{}, true
			}
		}
		return 0, mark{}, false
	}
	if len(b) == 1 {
		return 0, mark{}, true // a lone ESC at the end: wait for what follows
	}
	if m.osc133 == nil {
		return 0, mark{}, false
	}
	var prefix []byte
	switch {
	case bytes.HasPrefix(b, m.osc133):
		prefix = m.osc133
	case bytes.HasPrefix(b, m.osc7):
		prefix = m.osc7
	case len(b) < len(m.osc133) && bytes.HasPrefix(m.osc133, b),
		len(b) < len(m.osc7) && bytes.HasPrefix(m.osc7, b):
		return 0, mark{}, true
	default:
		return 0, mark{}, false
	}
	// Find the terminator: BEL or ST (ESC \), within maxMarkLen bytes.
	body := b[len(prefix):]
	end, termLen := -1, 0
	for k := 0; end < 0; k++ {
		if k == maxMarkLen { // too long
			if m.ours(b, len(prefix)+k) {
				m.skip = true
				return len(prefix) + k, mark{}, false
			}
			return 0, mark{}, false
		}
		if k == len(body) {
			return 0, mark{}, true // may still end
		}
		switch body[k] {
		case 0x07:
			end, termLen = k, 1
		case 0x1b:
			if k+1 == len(body) {
				return 0, mark{}, true // maybe ST split across reads
			}
			if body[k+1] != '\\' { // any other ESC ends the candidate
				if m.ours(b, len(prefix)+k) {
					return len(prefix) + k, mark{}, false
				}
				return 0, mark{}, false
			}
			end, termLen = k, 2
		}
	}
	total := len(prefix) + end + termLen
	// params: <nonce>;<rest>
	params := body[:end]
	if !m.ours(b, len(prefix)+end) {
		return 0, mark{}, false // forged or foreign: plain output
	}
	nl := len(m.nonce)
	if len(params) == nl || params[nl] != ';' {
		return total, mark{}, false // the nonce and then no ';': dropped
	}
	rest := string(params[nl+1:])
	if bytes.Equal(prefix, m.osc7) {
		return total, parseCwdMark(rest), false
	}
	return total, parse133(rest), false
}

// parse133 parses the part of an OSC 133 mark after the nonce.
func parse133(s string) mark {
	kind, arg, _ := strings.Cut(s, ";")
	switch kind {
	case "A":
		return mark{kind: markPrompt}
	case "B":
		return mark{kind: markInput}
	case "C":
		return mark{kind: markOutput}
	case "R":
		if v, err := strconv.ParseUint(arg, 10, 62); err == nil {
			return mark{kind: markReprompt, exit: int(v), hasExit: true}
		}
		return mark{}
	case "D", "N":
		k := markDone
		if kind == "N" {
			k = markNoRun
		}
		code, _, _ := strings.Cut(arg, ";")
		if v, err := strconv.Atoi(code); err == nil && v >= 0 && v <= 1<<16 {
			return mark{kind: k, exit: v, hasExit: true}
		}
		return mark{kind: k}
	}
	return mark{}
}

// parseCwdMark parses "file://host/path" (OSC 7). The path is percent-decoded (the
// shells encode %, control characters and, with them, bytes past ASCII); one that does
// not decode cleanly is taken literally.
func parseCwdMark(s string) mark {
	rest, ok := strings.CutPrefix(s, "file://")
	if !ok {
		return mark{}
	}
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return mark{}
	}
	path := rest[slash:]
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	return mark{kind: markCwd, cwd: path}
}
