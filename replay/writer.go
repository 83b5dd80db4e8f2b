package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Header is a recording's header (asciicast v3 or v2).
type Header struct {
	// Version is the asciicast version: 3 (0 means 3 to NewWriter) or 2.
	Version int
	// Width and Height are the terminal size at the start, in columns and rows
	// (1…10000; required).
	Width, Height int
	// Timestamp is when the recording started (written in whole Unix seconds; zero:
	// absent).
	Timestamp time.Time
	// Title is the recording's title ("": absent).
	Title string
	// Env holds environment variables worth knowing at playback, e.g. TERM and SHELL
	// (nil: absent).
	Env map[string]string
	// Command is the command that was recorded ("": absent).
	Command string
	// IdleTimeLimit asks players to cap pauses at this length (written in seconds as
	// idle_time_limit; 0: absent).
	IdleTimeLimit time.Duration
	// Offset is the session output offset of the recording's first output byte: a
	// part of a rotated recording starts after the output of the parts before it,
	// and its block index (which keeps whole-session offsets) is read shifted by it
	// (written as fleetmux_offset, a key players ignore; 0: absent).
	Offset int64
	// Start is the recording time at the part's start: the time the first event's
	// interval counts from in a v3 part of a rotated recording (written in
	// seconds as fleetmux_start, a key players ignore; 0: absent). Times in v2
	// files are absolute and need none.
	Start time.Duration
}

// headerV3JSON is a v3 header line; its field order is the file's.
type headerV3JSON struct {
	Version       int               `json:"version"`
	Term          termJSON          `json:"term"`
	Timestamp     int64             `json:"timestamp,omitempty"`
	IdleTimeLimit float64           `json:"idle_time_limit,omitempty"`
	Title         string            `json:"title,omitempty"`
	Command       string            `json:"command,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Offset        int64             `json:"fleetmux_offset,omitempty"`
	Start         float64           `json:"fleetmux_start,omitempty"`
}

type termJSON struct {
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
	Type string `json:"type,omitempty"`
}

// headerJSON is the header line; its field order is the file's.
type headerJSON struct {
	Version       int               `json:"version"`
	Width         int               `json:"width"`
	Height        int               `json:"height"`
	Timestamp     int64             `json:"timestamp,omitempty"`
	IdleTimeLimit float64           `json:"idle_time_limit,omitempty"`
	Title         string            `json:"title,omitempty"`
	Command       string            `json:"command,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Offset        int64             `json:"fleetmux_offset,omitempty"`
}

func (h Header) validate() error {
	if h.Version != 0 && h.Version != 2 && h.Version != 3 {
		return fmt.Errorf("replay: asciicast version %d: want 2 or 3", h.Version)
	}
	if h.Start < 0 || h.Start > maxSeconds*time.Second {
		return fmt.Errorf("replay: bad start %v", h.Start)
	}
	if h.Width < 1 || h.Height < 1 || h.Width > maxDim || h.Height > maxDim {
		return fmt.Errorf("replay: bad terminal size %dx%d: want 1…%d columns and rows", h.Width, h.Height, maxDim)
	}
	if h.Offset < 0 {
		return fmt.Errorf("replay: negative offset %d", h.Offset)
	}
	if h.IdleTimeLimit < 0 {
		return fmt.Errorf("replay: negative idle time limit %v", h.IdleTimeLimit)
	}
	return nil
}

// maxEvent is the most raw output bytes one "o" event holds: longer output is split
// (between characters) so that readers never need huge lines.
const maxEvent = 32 << 10

// Writer writes an asciicast v3 (or v2) recording. Times are given as durations since
// the recording started; a time earlier than the previous event's is written as the
// previous event's time, so times in the file never decrease. A v3 file holds each
// event's interval since the one before it (since Header.Start for the first).
//
// Output is buffered: Flush writes it out. A Writer is not safe for concurrent use.
// After the first error writing to the underlying writer every method returns it.
type Writer struct {
	bw      *pooledBuf
	line    []byte            // the line being built
	bline   []byte            // the "b" line being built
	patches []patch           // of the event being built
	held    [utf8.UTFMax]byte // an incomplete character at the end of the last Output
	nheld   int
	scratch []byte
	last    time.Duration // time of the last event (rounded)
	v3      bool
	offset  int64
	invalid int64
	err     error
}

// NewWriter writes the header h to w at once (so the file is a valid recording from
// the start) and returns a Writer for the events, which w receives in buffered chunks:
// when Flush is called or the 64 KiB buffer fills. The buffer is held only while
// events wait in it (between the first write after a Flush and the next Flush): an
// idle recording holds none.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	b, err := appendHeader(nil, h)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, fmt.Errorf("replay: write header: %w", err)
	}
	return newEventWriter(w, h), nil
}

// newEventWriter is a Writer of events (no header) in h's version, its clock at
// h.Start.
func newEventWriter(w io.Writer, h Header) *Writer {
	ew := &Writer{bw: &pooledBuf{w: w}, v3: h.Version != 2}
	if ew.v3 {
		ew.last = h.Start.Round(time.Microsecond)
	}
	return ew
}

// appendHeader appends h as a header line (its version's; 0 is 3), newline
// included.
func appendHeader(dst []byte, h Header) ([]byte, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	var ts int64
	if !h.Timestamp.IsZero() {
		ts = h.Timestamp.Unix()
	}
	var v any
	if h.Version == 2 {
		v = headerJSON{Version: 2, Width: h.Width, Height: h.Height, Timestamp: ts, IdleTimeLimit: h.IdleTimeLimit.Seconds(),
			Title: h.Title, Command: h.Command, Env: h.Env, Offset: h.Offset}
	} else {
		v = headerV3JSON{Version: 3, Term: termJSON{Cols: h.Width, Rows: h.Height, Type: h.Env["TERM"]}, Timestamp: ts,
			IdleTimeLimit: h.IdleTimeLimit.Seconds(), Title: h.Title, Command: h.Command, Env: h.Env, Offset: h.Offset,
			Start: h.Start.Round(time.Microsecond).Seconds()}
	}
	b := bytes.NewBuffer(dst)
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // cannot fail for these types
		return nil, fmt.Errorf("replay: header: %w", err)
	}
	return b.Bytes(), nil
}

// Output records p, written by the session at time t; it does not keep p. A UTF-8 character is never split
// across events: an incomplete character at the end of p (at most 3 bytes) is held
// back until the next Output completes it (or shows it invalid) or Close. Bytes that are
// not part of a valid UTF-8 character are recorded as U+FFFD plus a "b" event that
// keeps the original bytes (see the package doc); Invalid counts them.
func (w *Writer) Output(t time.Duration, p []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(p) == 0 {
		return nil
	}
	data := p
	if w.nheld > 0 {
		w.scratch = append(append(w.scratch[:0], w.held[:w.nheld]...), p...)
		data = w.scratch
		w.nheld = 0
	}
	// Hold back an incomplete character at the end.
	for k := 1; k <= min(utf8.UTFMax-1, len(data)); k++ {
		if c := data[len(data)-k]; utf8.RuneStart(c) {
			if c >= utf8.RuneSelf && !utf8.FullRune(data[len(data)-k:]) {
				w.nheld = copy(w.held[:], data[len(data)-k:])
				data = data[:len(data)-k]
			}
			break
		}
	}
	return w.output(t, data)
}

// output writes data (whole characters) as events of at most maxEvent bytes.
func (w *Writer) output(t time.Duration, data []byte) error {
	for len(data) > 0 {
		n := len(data)
		if n > maxEvent {
			n = maxEvent
			for k := 0; k < utf8.UTFMax-1 && !utf8.RuneStart(data[n]); k++ {
				n-- // cut before the character that straddles the limit
			}
		}
		w.patches = w.patches[:0]
		w.line = appendString(w.eventStart(w.line, t, "o"), data[:n], &w.patches)
		w.line = append(w.line, "]\n"...)
		if len(w.patches) > 0 {
			// The "b" event goes first: a reader that has it knows the next event's
			// raw bytes; a crash between the two lines leaves a "b" without an "o",
			// which readers drop.
			w.bline = append(w.eventStart(w.bline, t, "b"), '"')
			w.bline = appendPatches(w.bline, w.patches)
			w.bline = append(w.bline, "\"]\n"...)
			if err := w.write(w.bline); err != nil {
				return err
			}
			w.invalid += int64(len(w.patches))
		}
		if err := w.write(w.line); err != nil {
			return err
		}
		w.offset += int64(n)
		data = data[n:]
	}
	return nil
}

// eventStart returns `[TIME, "CODE", ` at time t (made non-decreasing), reusing buf:
// TIME is t in a v2 file, the interval since the last event in a v3 one.
func (w *Writer) eventStart(buf []byte, t time.Duration, code string) []byte {
	t = t.Round(time.Microsecond)
	if t < w.last {
		t = w.last
	}
	at := t
	if w.v3 {
		at = t - w.last
	}
	w.last = t
	b := append(buf[:0], '[')
	b = appendTime(b, at)
	b = append(b, ", \""...)
	b = append(b, code...)
	return append(b, "\", "...)
}

func (w *Writer) write(b []byte) error {
	if _, err := w.bw.Write(b); err != nil {
		w.err = fmt.Errorf("replay: write: %w", err)
		return w.err
	}
	return nil
}

// Resize records that the terminal became cols×rows at time t.
func (w *Writer) Resize(t time.Duration, cols, rows int) error {
	if w.err != nil {
		return w.err
	}
	if cols < 1 || rows < 1 || cols > maxDim || rows > maxDim {
		return fmt.Errorf("replay: bad terminal size %dx%d: want 1…%d columns and rows", cols, rows, maxDim)
	}
	b := append(w.eventStart(w.line, t, "r"), '"')
	b = strconv.AppendInt(b, int64(cols), 10)
	b = append(b, 'x')
	b = strconv.AppendInt(b, int64(rows), 10)
	w.line = append(b, "\"]\n"...)
	return w.write(w.line)
}

// Marker records a marker with a label at time t (the recorder writes one at the start
// of each block). Invalid UTF-8 in label becomes U+FFFD.
func (w *Writer) Marker(t time.Duration, label string) error {
	if w.err != nil {
		return w.err
	}
	b := appendString(w.eventStart(w.line, t, "m"), []byte(strings.ToValidUTF8(label, "\ufffd")), nil)
	w.line = append(b, "]\n"...)
	return w.write(w.line)
}

// Exit records that the session's program exited with code at time t (a v3 "x"
// event; v2 players skip it).
func (w *Writer) Exit(t time.Duration, code int) error {
	if w.err != nil {
		return w.err
	}
	b := append(w.eventStart(w.line, t, "x"), '"')
	b = strconv.AppendInt(b, int64(code), 10)
	w.line = append(b, "\"]\n"...)
	return w.write(w.line)
}

// event records an event of another code with data as it is (invalid UTF-8
// becomes U+FFFD).
func (w *Writer) event(t time.Duration, code string, data []byte) error {
	if w.err != nil {
		return w.err
	}
	b := appendString(w.eventStart(w.line, t, code), data, nil)
	w.line = append(b, "]\n"...)
	return w.write(w.line)
}

// Time is the time of the last event written (Header.Start before any in v3).
func (w *Writer) Time() time.Duration { return w.last }

// Buffered is how many bytes of events wait for the next Flush (or a full buffer).
func (w *Writer) Buffered() int { return w.bw.Buffered() }

// Flush writes the buffered events to the underlying writer. An incomplete character
// held back by Output stays held back: it is not output yet (see Pending).
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = fmt.Errorf("replay: write: %w", err)
	}
	return w.err
}

// Close records the bytes held back by Output (an incomplete character the session
// never completed, so invalid: U+FFFD) at the time of the last event, and flushes.
// It does not close the underlying writer. Later calls return ErrClosed.
func (w *Writer) Close() error {
	if w.err != nil {
		if w.err == ErrClosed {
			return nil
		}
		return w.err
	}
	if w.nheld > 0 {
		n := w.nheld
		w.nheld = 0
		if err := w.output(w.last, w.held[:n]); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	w.err = ErrClosed
	return nil
}

// Offset is the number of output bytes recorded so far: the output offset of the next
// recorded byte. It counts raw bytes as given to Output, not those held back (Pending).
func (w *Writer) Offset() int64 { return w.offset }

// Pending is the number of bytes Output holds back (0…3): Offset()+Pending() is the
// number of bytes given to Output.
func (w *Writer) Pending() int { return w.nheld }

// Invalid is the number of output bytes that were not valid UTF-8 (written as U+FFFD,
// with the original bytes in "b" events).
func (w *Writer) Invalid() int64 { return w.invalid }
