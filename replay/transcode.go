package replay

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Transcoder re-encodes the events of one or more recordings (v3 or v2, the parts of a
// rotated recording one after the other) as one recording in Version, a few lines at a
// time: a node serves a recording in pieces, and the state between pieces is T alone.
// Output bytes come out exactly as they went in (invalid UTF-8 keeps its "b" event).
//
// Use: Header once (the first part's header), then for each part Lines on its event
// lines, from just after its header (first true) or from where the last call stopped.
type Transcoder struct {
	// Version is the version written: 3 (0 means 3) or 2.
	Version int
	// T is the time of the last event written, since the recording's start: the
	// state a caller carries from one call to the next.
	T time.Duration
	// Label, when set, rewrites each marker's label (e.g. to add a block's exit
	// code from the index: IndexLabel).
	Label func(label string) string

	p    eventParser
	spec []byte
	out  bytes.Buffer
}

// Header appends h (the header of the first part) as the header line in tc.Version;
// T starts at h.Start.
func (tc *Transcoder) Header(dst []byte, h Header) ([]byte, error) {
	h.Version = tc.version()
	tc.T = h.Start
	if h.Version == 2 {
		h.Start = 0
	}
	return appendHeader(dst, h)
}

func (tc *Transcoder) version() int {
	if tc.Version == 2 {
		return 2
	}
	return 3
}

// Lines re-encodes the whole event lines at the start of src, event lines of a part
// whose header is h, and appends them to dst. first says src starts right after the
// part's header (a v3 part's first interval counts from h.Start). It returns dst and
// how many bytes of src it used: whole lines only, never a "b" line without the line
// after it nor a last line without its newline, which the caller gives again with
// what follows. Blank lines and v3 comments are dropped. A malformed line is an error
// wrapping ErrFormat.
func (tc *Transcoder) Lines(dst, src []byte, h Header, first bool) ([]byte, int, error) {
	sc := scanner{v3: h.Version == 3}
	prev := tc.T
	if first && sc.v3 {
		prev = h.Start
	}
	tc.out.Reset()
	tc.out.Write(dst)
	w := newEventWriter(&tc.out, Header{Version: tc.version()})
	w.last = tc.T
	used := 0
	for used < len(src) {
		l, rest, ok := cutLine(src[used:])
		if !ok {
			break
		}
		n := len(src[used:]) - len(rest)
		if sc.skip(l) {
			used += n
			continue
		}
		t, err := tc.p.parse(l)
		if err != nil {
			return dst, used, fmt.Errorf("%w: %w", ErrFormat, err)
		}
		if t, err = sc.at(prev, t); err != nil {
			return dst, used, fmt.Errorf("%w: %w", ErrFormat, err)
		}
		kind := kindString(tc.p.kind)
		data := tc.p.data
		if kind == "b" {
			if !tc.p.isStr {
				return dst, used, fmt.Errorf("%w: \"b\" data must be a string", ErrFormat)
			}
			tc.spec = append(tc.spec[:0], data...)
			ol, orest, ok := cutLine(rest)
			if !ok {
				break // the "o" line is not here yet
			}
			n = len(src[used:]) - len(orest)
			ot, err := tc.p.parse(ol)
			if err != nil {
				return dst, used, fmt.Errorf("%w: %w", ErrFormat, err)
			}
			if t, err = sc.at(t, ot); err != nil {
				return dst, used, fmt.Errorf("%w: %w", ErrFormat, err)
			}
			if string(tc.p.kind) != "o" || !tc.p.isStr {
				return dst, used, fmt.Errorf(`%w: a "b" event must come right before an "o" event`, ErrFormat)
			}
			if data, err = applyPatches(tc.p.data, tc.spec); err != nil {
				return dst, used, fmt.Errorf("%w: %w", ErrFormat, err)
			}
			kind = "o"
		}
		prev = max(t, prev)
		if err := tc.write(w, prev, kind, data); err != nil {
			return dst, used, err
		}
		used += n
	}
	if err := w.Flush(); err != nil {
		return dst, used, err
	}
	tc.T = w.last
	return append(dst[:0], tc.out.Bytes()...), used, nil
}

// write writes one event; its data is checked as the reader checks it.
func (tc *Transcoder) write(w *Writer, t time.Duration, kind string, data []byte) error {
	if (kind == "o" || kind == "r" || kind == "m" || kind == "i") && !tc.p.isStr {
		return fmt.Errorf("%w: %q data must be a string", ErrFormat, kind)
	}
	switch kind {
	case "o":
		if len(data) == 0 {
			return w.event(t, kind, nil) // output() writes nothing for nothing
		}
		return w.output(t, data)
	case "r":
		cols, rows, err := parseSize(data)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrFormat, err)
		}
		return w.Resize(t, cols, rows)
	case "m":
		label := string(data)
		if tc.Label != nil {
			label = tc.Label(label)
		}
		return w.Marker(t, label)
	}
	if !tc.p.isStr {
		data = nil // other codes with other data: kept with an empty string
	}
	return w.event(t, kind, data)
}

// cutLine returns the line at the start of b without its newline and what follows;
// false when b holds no newline.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, b, false
	}
	return b[:i], b[i+1:], true
}

// Convert writes the recording read from src as one in version (3 or 2), every event
// as it was, marker labels passed through label when it is not nil. A last line
// without its newline that does not parse (a writer still writing, or one that
// crashed) is left out, as Open leaves it out.
func Convert(dst io.Writer, src io.Reader, version int, label func(string) string) error {
	lr := newLineReader(src, 0)
	l, err := lr.next(maxHeader)
	switch {
	case err == io.EOF:
		return fmt.Errorf("%w: empty", ErrFormat)
	case err != nil:
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	h, err := parseHeader(l.b)
	if err != nil {
		return fmt.Errorf("%w: line 1: %w", ErrFormat, err)
	}
	tc := Transcoder{Version: version, Label: label}
	out, err := tc.Header(nil, h)
	if err != nil {
		return err
	}
	if _, err := dst.Write(out); err != nil {
		return err
	}
	var pend []byte // a "b" line waiting for its "o" line
	first := true
	for {
		l, err := lr.next(maxLine)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrFormat, err)
		}
		pend = append(append(pend, l.b...), '\n')
		var used int
		if out, used, err = tc.Lines(out[:0], pend, h, first); err != nil {
			if !l.terminated {
				return nil // a last line cut short: left out, as Open leaves it
			}
			return fmt.Errorf("line %d: %w", l.num, err)
		}
		if used > 0 {
			first = false
		}
		pend = append(pend[:0], pend[used:]...)
		if _, err := dst.Write(out); err != nil {
			return err
		}
	}
}

// BlockLabel is the label of block n's marker: "block N: COMMAND" (MarkerBlock
// reads it back).
func BlockLabel(n int, command string) string {
	return "block " + strconv.Itoa(n) + ": " + command
}

// MarkerBlock reads the block number and command of a marker label that BlockLabel
// made, and the exit code IndexLabel added (nil: none); false for other labels.
func MarkerBlock(label string) (n int, command string, exit *int, ok bool) {
	rest, ok := strings.CutPrefix(label, "block ")
	if !ok {
		return 0, "", nil, false
	}
	num, cmd, ok := strings.Cut(rest, ": ")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || n < 1 {
		return 0, "", nil, false
	}
	if i := strings.LastIndex(cmd, ExitSuffix); i >= 0 {
		if code, err := strconv.Atoi(cmd[i+len(ExitSuffix):]); err == nil {
			return n, cmd[:i], &code, true
		}
	}
	return n, cmd, nil, true
}

// IndexLabel returns a Transcoder.Label that adds each block's exit code, from the
// index, to its marker: "block 3: make test" becomes "block 3: make test ⏎ exit 2" (the
// recorder writes the marker when the block starts, before its exit is known).
// Labels of blocks the index does not have, or without an exit code, stay as they are.
func IndexLabel(index []IndexEntry) func(string) string {
	codes := make(map[int]int, len(index))
	for _, e := range index {
		if e.ExitCode != nil {
			codes[e.N] = *e.ExitCode
		}
	}
	return func(label string) string {
		n, _, exit, ok := MarkerBlock(label)
		if !ok || exit != nil {
			return label
		}
		if code, ok := codes[n]; ok {
			return label + ExitSuffix + strconv.Itoa(code)
		}
		return label
	}
}

// ExitSuffix comes between a marker's command and the block's exit code (IndexLabel).
const ExitSuffix = " ⏎ exit "
