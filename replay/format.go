// Package replay records terminal sessions as asciicast v3 files with a block index next
// to them, and reads (v3 and v2), converts, seeks and plays them back. It imports only
// the standard library and api; callers that want a screen bring their own terminal
// emulator.
//
// # Format
//
// A recording is an asciicast v3 file (https://docs.asciinema.org/manual/asciicast/v3/):
// a JSON header line, then one event per line, each a JSON array [interval, code,
// data] with the seconds since the event before it (6 decimals; the first counts from
// the header's fleetmux_start, or 0):
//
//	{"version":3,"term":{"cols":80,"rows":24,"type":"xterm-256color"},"timestamp":1700000000}
//	[0.101000, "o", "hi \u001b[31mthere\u001b[0m\r\n"]
//	[1.399000, "r", "120x40"]
//	[0.500000, "m", "block 3: make test"]
//	[0.000000, "b", "4:ff"]
//	[0.000000, "o", "bad \ufffd byte"]
//	[2.000000, "x", "0"]
//
// Codes: "o" output, "r" resize ("COLSxROWS"), "m" marker (the recorder writes one at
// the start of each block, labelled "block N: COMMAND"; a served recording's label also
// has the block's exit code, from the index: see Transcoder.Label), "x" the exit status
// of the session's program, and "b", this package's extension (players skip codes they
// do not know). A JSON string holds only valid UTF-8, so each output byte that is not
// part of a valid UTF-8 character is written as U+FFFD in its "o" event, and a "b"
// event right before that event lists the replaced bytes as space-separated "POS:HH"
// pairs: the byte position of the U+FFFD in the event's decoded text and the original
// byte in hex. Readers of this package get the exact bytes back; other players show
// U+FFFD.
//
// asciicast v2 files (times since the start instead of intervals; "width" and
// "height" in the header) are read the same way, written with Header.Version 2, and
// any recording converts to either version (Convert, Transcoder): Debian's asciinema
// 2.2 reads only v2.
//
// # Output offsets
//
// An output offset counts raw output bytes from the start of the recording, exactly as
// the session counted them (a replaced byte counts 1, not the 3 bytes of U+FFFD), so the
// offsets of the block index and of the session's output stream address the recording
// directly.
//
// # Block index
//
// Next to NAME.cast, NAME.blocks.jsonl (see IndexPath) holds one JSON line per finished
// block: its number, command, exit code, times and output range.
//
// A recording may be one part of a longer one (a node rotates a session's recording
// at its quota): the header's "fleetmux_offset" (Header.Offset, a key players ignore)
// is the session output offset of the part's first byte, and "fleetmux_start"
// (Header.Start) the time the part starts at. The index keeps session offsets;
// readers of a part shift them by it.
package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// Errors. Returned errors wrap these with details; test with errors.Is.
var (
	// ErrFormat: the file is not a well-formed asciicast v3 or v2 recording or block index.
	ErrFormat = errors.New("replay: not an asciicast v3 or v2 recording")
	// ErrClosed: the Writer was closed.
	ErrClosed = errors.New("replay: writer closed")
	// ErrRange: an offset or range outside the recording's output.
	ErrRange = errors.New("replay: out of range")
	// ErrNoIndex: the recording has no block index.
	ErrNoIndex = errors.New("replay: no block index")
	// ErrNoBlock: the block is not in the index.
	ErrNoBlock = errors.New("replay: no such block")
)

const (
	// maxDim bounds the terminal width and height a recording may give.
	maxDim = 10000
	// maxSeconds bounds event times (about 31 years), so durations cannot overflow.
	maxSeconds = 1e9
	// maxLine bounds one line of a recording or an index (a corrupt file without
	// newlines must not be read into memory whole).
	maxLine = 64 << 20
	// maxHeader bounds the header line.
	maxHeader = 1 << 20
)

// appendTime appends d in seconds with 6 decimals (d ≥ 0, rounded to microseconds).
func appendTime(b []byte, d time.Duration) []byte {
	us := int64((d + 500*time.Nanosecond) / time.Microsecond)
	b = strconv.AppendInt(b, us/1e6, 10)
	frac := us % 1e6
	b = append(b, '.')
	for div := int64(1e5); div > 0; div /= 10 {
		b = append(b, byte('0'+frac/div%10))
	}
	return b
}

// patch records one byte that was written as U+FFFD: pos is the position of the
// U+FFFD in the decoded text of its "o" event, b the original byte.
type patch struct {
	pos int
	b   byte
}

const hexDigits = "0123456789abcdef"

// plain holds the bytes that stand for themselves in a JSON string: ASCII but control
// characters, '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendString appends s as a JSON string. Bytes that are not part of a valid UTF-8
// character become U+FFFD and are recorded in *patches (when patches is nil they are
// replaced silently). Control characters, '"', '\\', U+0085, U+2028 and U+2029 are
// escaped, so no line splitter (not even one that knows Unicode line breaks) cuts an
// event in two.
func appendString(dst, s []byte, patches *[]patch) []byte {
	dst = append(dst, '"')
	start, invalid := 0, 0
	for i := 0; i < len(s); {
		c := s[i]
		if plain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
			if patches != nil {
				// Decoded so far: i bytes, each replaced one 2 bytes longer.
				*patches = append(*patches, patch{pos: i + 2*invalid, b: c})
			}
			invalid++
			i++
			start = i
		case r == 0x85 || r == 0x2028 || r == 0x2029:
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
			i += size
			start = i
		default:
			i += size
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendPatches appends the data of a "b" event (without quotes: it is plain ASCII).
func appendPatches(dst []byte, ps []patch) []byte {
	for i, p := range ps {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = strconv.AppendInt(dst, int64(p.pos), 10)
		dst = append(dst, ':', hexDigits[p.b>>4], hexDigits[p.b&0xf])
	}
	return dst
}

// applyPatches puts the original bytes of a "b" event's data back into the decoded
// text of its "o" event, in place, and returns the raw bytes.
func applyPatches(text, spec []byte) ([]byte, error) {
	w, r, last := 0, 0, -1 // write index, read index, position of the previous patch
	for len(spec) > 0 {
		i := 0
		for i < len(spec) && spec[i] != ' ' {
			i++
		}
		item := spec[:i]
		spec = spec[min(i+1, len(spec)):]
		if len(item) < 4 || item[len(item)-3] != ':' {
			return nil, fmt.Errorf("bad \"b\" item %q: want POS:HH", item)
		}
		pos, err := strconv.Atoi(string(item[:len(item)-3]))
		if err != nil || pos <= last || pos < 0 {
			return nil, fmt.Errorf("bad \"b\" position %q", item[:len(item)-3])
		}
		b, err := strconv.ParseUint(string(item[len(item)-2:]), 16, 8)
		if err != nil {
			return nil, fmt.Errorf("bad \"b\" byte %q", item[len(item)-2:])
		}
		if pos+3 > len(text) || string(text[pos:pos+3]) != "\ufffd" {
			return nil, fmt.Errorf("\"b\" position %d is not a U+FFFD of the output", pos)
		}
		if pos < r {
			return nil, fmt.Errorf("\"b\" position %d overlaps the previous one", pos)
		}
		w += copy(text[w:], text[r:pos])
		text[w] = byte(b)
		w++
		r = pos + 3
		last = pos
	}
	w += copy(text[w:], text[r:])
	return text[:w], nil
}

// parseTime parses an event time: a JSON number of seconds, 0 ≤ s ≤ maxSeconds.
func parseTime(tok []byte) (time.Duration, error) {
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > maxSeconds {
		return 0, fmt.Errorf("bad time %q", tok)
	}
	return time.Duration(math.Round(f*1e6)) * time.Microsecond, nil
}

// parseSize parses the data of a resize event, "COLSxROWS".
func parseSize(s []byte) (cols, rows int, err error) {
	for i, c := range s {
		if c == 'x' {
			cols, err1 := strconv.Atoi(string(s[:i]))
			rows, err2 := strconv.Atoi(string(s[i+1:]))
			if err1 != nil || err2 != nil || cols < 1 || rows < 1 || cols > maxDim || rows > maxDim {
				break
			}
			return cols, rows, nil
		}
	}
	return 0, 0, fmt.Errorf("bad size %q: want COLSxROWS", s)
}

// eventParser parses event lines, reusing its buffers: kind and data are valid until
// the next parse.
type eventParser struct {
	kind  []byte // the event code
	data  []byte // the decoded data when it is a string
	isStr bool   // data was a JSON string (other JSON values are accepted for unknown codes)
}

// parse parses one event line, [time, "code", data], with JSON whitespace anywhere
// between tokens.
func (p *eventParser) parse(b []byte) (time.Duration, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return 0, errors.New("want an event: [time, code, data]")
	}
	i = skipSpace(b, i+1)
	j := scanNumber(b, i)
	if j == i {
		return 0, errors.New("want a number of seconds first")
	}
	t, err := parseTime(b[i:j])
	if err != nil {
		return 0, err
	}
	if i, err = expect(b, j, ','); err != nil {
		return 0, err
	}
	if p.kind, i, err = unquote(p.kind[:0], b, i); err != nil {
		return 0, fmt.Errorf("event code: %w", err)
	}
	if i, err = expect(b, i, ','); err != nil {
		return 0, err
	}
	p.isStr = i < len(b) && b[i] == '"'
	if p.isStr {
		if p.data, i, err = unquote(p.data[:0], b, i); err != nil {
			return 0, fmt.Errorf("event data: %w", err)
		}
	} else {
		p.data = p.data[:0]
		if i, err = skipValue(b, i); err != nil {
			return 0, fmt.Errorf("event data: %w", err)
		}
	}
	if i, err = expect(b, i, ']'); err != nil {
		return 0, err
	}
	if i != len(b) {
		return 0, fmt.Errorf("unexpected %q after the event", b[i:min(len(b), i+8)])
	}
	return t, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// expect skips spaces, the byte c and the spaces after it.
func expect(b []byte, i int, c byte) (int, error) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != c {
		return 0, fmt.Errorf("want %q", c)
	}
	return skipSpace(b, i+1), nil
}

// scanNumber returns the end of the JSON number at b[i:] (i when there is none).
func scanNumber(b []byte, i int) int {
	start := i
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return start
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return start
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return start
		}
	}
	return i
}

// skipValue skips one JSON value of any kind at b[i:].
func skipValue(b []byte, i int) (int, error) {
	d := json.NewDecoder(bytes.NewReader(b[i:]))
	var v json.RawMessage
	if err := d.Decode(&v); err != nil {
		return 0, err
	}
	return i + int(d.InputOffset()), nil
}

// unquote decodes the JSON string at b[i:] (b[i] must be '"'), appending it to dst,
// and returns the index after the closing quote. It decodes exactly as encoding/json
// does: invalid UTF-8 and lone surrogates become U+FFFD.
func unquote(dst, b []byte, i int) ([]byte, int, error) {
	if i >= len(b) || b[i] != '"' {
		return dst, 0, errors.New("want a string")
	}
	i++
	start := i
	for i < len(b) {
		c := b[i]
		if plain[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			return append(dst, b[start:i]...), i + 1, nil
		case c == '\\':
			dst = append(dst, b[start:i]...)
			if i+1 >= len(b) {
				return dst, 0, errors.New("unterminated string")
			}
			i += 2
			switch b[i-1] {
			case '"', '\\', '/':
				dst = append(dst, b[i-1])
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(b, i)
				if !ok {
					return dst, 0, errors.New("bad \\u escape")
				}
				i += 4
				if utf16.IsSurrogate(r) {
					if r2, ok := hex4(b, i+2); ok && i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							r = d
							i += 6
						} else {
							r = utf8.RuneError
						}
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
			default:
				return dst, 0, fmt.Errorf("bad escape \\%c", b[i-1])
			}
			start = i
		case c < 0x20:
			return dst, 0, fmt.Errorf("control character %#02x in a string", c)
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, b[start:i]...)
				dst = append(dst, "\ufffd"...)
				start = i + 1
			}
			i += size
		}
	}
	return dst, 0, errors.New("unterminated string")
}

// hex4 parses the 4 hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
