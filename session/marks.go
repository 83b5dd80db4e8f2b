package session

import (
	"bytes"
	"crypto/subtle"
	"strconv"
	"strings"
)

// Shell integration marks.
//
// The shell integration writes OSC 133 (A prompt start, B prompt end, C command output
// start, D;<exit> command done) and OSC 7 (working directory) sequences, each carrying the
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

// markKind is the kind of a shell integration mark.
type markKind byte

const (
	markPrompt  markKind = 'A' // prompt starts
	markInput   markKind = 'B' // prompt ends, command input starts
	markOutput  markKind = 'C' // command accepted, its output starts
	markDone    markKind = 'D' // command finished, with its exit code
	markCwd     markKind = 'P' // working directory (OSC 7)
	markInvalid markKind = 0
)

// mark is one parsed shell integration mark.
type mark struct {
	kind    markKind
	exit    int  // markDone: the exit code
	hasExit bool // markDone: exit is valid
	cwd     string
}

// maxMarkLen bounds how long a candidate mark may be before it is treated as plain
// output. A cwd can be long, so this is generous; output is held back only while a
// candidate is incomplete.
const maxMarkLen = 8192

// Tracked sequences that are not marks but whose state the session needs. They stay in
// the output stream.
var (
	seqPasteOn  = []byte("\x1b[?2004h")
	seqPasteOff = []byte("\x1b[?2004l")
)

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
	paste  bool   // bracketed paste mode, as last set by the program
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
		j := bytes.IndexByte(data[i:], 0x1b)
		if j < 0 {
			break
		}
		j += i
		rest := data[j:]
		n, mrk, hold := m.match(rest)
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

// flush emits whatever is held back as plain output (at end of stream).
func (m *markScanner) flush(out func([]byte)) {
	if len(m.pend) > 0 {
		out(m.pend)
		m.pend = m.pend[:0]
	}
}

// match looks at b, which starts with ESC. It returns the length of a complete mark to
// remove (with the parsed mark, kind markInvalid for a nonce-bearing sequence it does
// not understand), or n == 0 when b is not a mark, or hold when b is an incomplete
// prefix that may still become a mark or a tracked sequence.
func (m *markScanner) match(b []byte) (n int, mk mark, hold bool) {
	// Tracked (kept) sequences: update state, never removed.
	for _, seq := range [...][]byte{seqPasteOn, seqPasteOff} {
		if bytes.HasPrefix(b, seq) {
			m.paste = seq[len(seq)-1] == 'h'
			return 0, mark{}, false
		}
		if len(b) < len(seq) && bytes.HasPrefix(seq, b) {
			return 0, mark{}, true
		}
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
	// Find the terminator: BEL or ST (ESC \).
	body := b[len(prefix):]
	lim := min(len(body), maxMarkLen)
	end, termLen := -1, 0
	for k := 0; k < lim; k++ {
		if body[k] == 0x07 {
			end, termLen = k, 1
			break
		}
		if body[k] == 0x1b {
			if k+1 >= len(body) {
				break // maybe ST split across reads
			}
			if body[k+1] == '\\' {
				end, termLen = k, 2
			}
			break // any other ESC ends the candidate
		}
	}
	if end < 0 {
		if len(body) < maxMarkLen && !bytes.ContainsRune(body[:lim], 0x1b) {
			return 0, mark{}, true
		}
		if len(body) < maxMarkLen && len(body) > 0 && body[len(body)-1] == 0x1b {
			return 0, mark{}, true
		}
		return 0, mark{}, false
	}
	total := len(prefix) + end + termLen
	params := body[:end]
	// params: <nonce>;<rest>
	semi := bytes.IndexByte(params, ';')
	if semi < 0 || subtle.ConstantTimeCompare(params[:semi], m.nonce) != 1 {
		return 0, mark{}, false // forged or foreign: plain output
	}
	rest := string(params[semi+1:])
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
	case "D":
		code, _, _ := strings.Cut(arg, ";")
		if v, err := strconv.Atoi(code); err == nil && v >= 0 && v <= 1<<16 {
			return mark{kind: markDone, exit: v, hasExit: true}
		}
		return mark{kind: markDone}
	}
	return mark{}
}

// parseCwdMark parses "file://host/path" (OSC 7). The path is taken literally; a
// percent-encoded path is decoded when it decodes cleanly.
func parseCwdMark(s string) mark {
	rest, ok := strings.CutPrefix(s, "file://")
	if !ok {
		return mark{}
	}
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return mark{}
	}
	return mark{kind: markCwd, cwd: rest[slash:]}
}
