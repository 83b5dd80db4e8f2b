package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"sync"
	"time"
)

// Event is one event of a recording.
type Event struct {
	// T is the event's time since the recording started.
	T time.Duration
	// Kind is the event code: "o" output, "r" resize, "m" marker, "i" input; other
	// codes are passed on as found.
	Kind string
	// Data is, for "o", the exact output bytes (as the session wrote them: not
	// necessarily valid UTF-8); for "r", "COLSxROWS"; for "m", the label. Data of
	// unknown codes that is not a JSON string is "".
	Data string
	// Offset is the output offset of Data's first byte for "o", and the output offset
	// at the event for the others.
	Offset int64
	// Cols and Rows are the new size of an "r" event.
	Cols, Rows int
}

// cursor is a point between two events of a recording's file.
type cursor struct {
	file int64         // file offset of the next event's first line
	line int           // number of the lines before it
	ev   int           // number of events before it
	out  int64         // output bytes before it
	t    time.Duration // time of the event before it (0 at the start)
}

// cpEvery is the distance in file bytes between checkpoints: a seek reads at most this
// much of the file to find its event, and a recording keeps 40 bytes per checkpoint.
const cpEvery = 64 << 10

// Recording is an asciicast v3 or v2 recording opened for reading. It holds a sparse index of
// the file (a checkpoint every 64 KiB), never the output itself: reads go to the file.
//
// A Recording is safe for concurrent use. It sees the file as it was when opened, or
// at the last Refresh; a truncated last line (a writer that crashed, or is still
// writing) is left out until Refresh finds it complete.
type Recording struct {
	f    *os.File
	path string
	hdr  Header

	mu        sync.RWMutex
	cps       []cursor // cps[0] is the first event; appended to, never changed
	scanned   cursor   // after the last whole event read
	truncated bool
	blocks    []IndexEntry
	blocksErr error
}

// Open opens the recording at castPath and reads it once to index it, and reads its
// block index (IndexPath) when there is one. A file that is not an asciicast v3 or v2
// recording, or has a malformed line before its last, is an error wrapping ErrFormat
// that gives the line number; a malformed last line without its newline is taken for
// a write cut short, and left out (see Truncated).
func Open(castPath string) (*Recording, error) {
	f, err := os.Open(castPath)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	r := &Recording{f: f, path: castPath}
	if err := r.open(); err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

func (r *Recording) open() error {
	fi, err := r.f.Stat()
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%w: %s is a directory", ErrFormat, r.path)
	}
	lr := newLineReader(io.NewSectionReader(r.f, 0, fi.Size()), 0)
	l, err := lr.next(maxHeader)
	switch {
	case err == io.EOF:
		return fmt.Errorf("%w: %s is empty", ErrFormat, r.path)
	case err != nil:
		return fmt.Errorf("%w: %s: %w", ErrFormat, r.path, err)
	}
	if r.hdr, err = parseHeader(l.b); err != nil {
		return fmt.Errorf("%w: %s: line 1: %w", ErrFormat, r.path, err)
	}
	r.cps = []cursor{{file: l.end, line: 1, t: r.hdr.startTime()}}
	r.scanned = r.cps[0]
	if err := r.scan(fi.Size()); err != nil {
		return err
	}
	r.blocks, r.blocksErr = OpenIndex(r.path)
	return nil
}

// startTime is the time before a recording's first event: Start in v3 (whose
// intervals count from it), 0 in v2 (whose times are absolute).
func (h Header) startTime() time.Duration {
	if h.Version == 2 {
		return 0
	}
	return h.Start
}

// ParseHeader parses the header line of an asciicast v3 or v2 recording (without its
// newline); errors wrap ErrFormat.
func ParseHeader(b []byte) (Header, error) {
	h, err := parseHeader(b)
	if err != nil {
		return h, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	return h, nil
}

// parseHeader parses an asciicast v3 or v2 header line.
func parseHeader(b []byte) (Header, error) {
	var hj struct {
		Version *int `json:"version"`
		Width   int  `json:"width"`
		Height  int  `json:"height"`
		Term    *struct {
			Cols int `json:"cols"`
			Rows int `json:"rows"`
		} `json:"term"`
		Start         *float64       `json:"fleetmux_start"`
		Timestamp     *float64       `json:"timestamp"`
		IdleTimeLimit *float64       `json:"idle_time_limit"`
		Title         *string        `json:"title"`
		Command       *string        `json:"command"`
		Env           map[string]any `json:"env"`
		Offset        int64          `json:"fleetmux_offset"`
	}
	if err := json.Unmarshal(b, &hj); err != nil {
		return Header{}, fmt.Errorf("bad header: %w", err)
	}
	var h Header
	switch {
	case hj.Version == nil:
		return h, errors.New("the header has no version")
	case *hj.Version != 2 && *hj.Version != 3:
		return h, fmt.Errorf("asciicast version %d: only versions 2 and 3 are supported", *hj.Version)
	}
	h.Version, h.Width, h.Height, h.Offset = *hj.Version, hj.Width, hj.Height, hj.Offset
	if h.Version == 3 {
		if hj.Term == nil {
			return h, errors.New("the v3 header has no term")
		}
		h.Width, h.Height = hj.Term.Cols, hj.Term.Rows
		if s := hj.Start; s != nil {
			if *s < 0 || *s > maxSeconds {
				return h, fmt.Errorf("bad fleetmux_start %v", *s)
			}
			h.Start = time.Duration(math.Round(*s*1e6)) * time.Microsecond
		}
	}
	if err := h.validate(); err != nil {
		return h, err
	}
	if ts := hj.Timestamp; ts != nil {
		if math.Abs(*ts) > 1e11 {
			return h, fmt.Errorf("bad timestamp %v", *ts)
		}
		sec, frac := math.Modf(*ts)
		h.Timestamp = time.Unix(int64(sec), int64(frac*1e9))
	}
	if l := hj.IdleTimeLimit; l != nil {
		if *l < 0 || *l > maxSeconds {
			return h, fmt.Errorf("bad idle_time_limit %v", *l)
		}
		h.IdleTimeLimit = time.Duration(*l * float64(time.Second))
	}
	if hj.Title != nil {
		h.Title = *hj.Title
	}
	if hj.Command != nil {
		h.Command = *hj.Command
	}
	for k, v := range hj.Env {
		if s, ok := v.(string); ok {
			if h.Env == nil {
				h.Env = make(map[string]string)
			}
			h.Env[k] = s
		}
	}
	return h, nil
}

// scan reads the events from r.scanned up to the file offset limit, adding
// checkpoints. The caller holds r.mu for writing (or has not shared r yet).
func (r *Recording) scan(limit int64) error {
	s := r.scanner(r.scanned, limit)
	var ev event
	last := r.cps[len(r.cps)-1].file
	for {
		before := s.cur
		switch err := s.next(&ev); {
		case err == io.EOF:
			r.scanned, r.truncated = s.cur, false
			return nil
		case err == errTruncated:
			r.scanned, r.truncated = before, true
			return nil
		case err != nil:
			r.scanned = before
			return fmt.Errorf("replay: %s: %w", r.path, err)
		}
		if before.file-last >= cpEvery {
			r.cps = append(r.cps, before)
			last = before.file
		}
	}
}

// Refresh reads what was appended to the file since Open or the last Refresh (the
// recording of a live session grows), and rereads the block index.
func (r *Recording) Refresh() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	fi, err := r.f.Stat()
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if fi.Size() < r.scanned.file {
		return fmt.Errorf("replay: %s shrank from %d to %d bytes", r.path, r.scanned.file, fi.Size())
	}
	if err := r.scan(fi.Size()); err != nil {
		return err
	}
	r.blocks, r.blocksErr = OpenIndex(r.path)
	return nil
}

// Close closes the file. Reads after Close fail.
func (r *Recording) Close() error { return r.f.Close() }

// Path is the file the recording was opened from.
func (r *Recording) Path() string { return r.path }

// Header is the recording's header (a copy).
func (r *Recording) Header() Header {
	h := r.hdr
	if h.Env != nil {
		h.Env = make(map[string]string, len(r.hdr.Env))
		for k, v := range r.hdr.Env {
			h.Env[k] = v
		}
	}
	return h
}

// Duration is the time of the last event.
func (r *Recording) Duration() time.Duration { _, end := r.snap(); return end.t }

// End is the number of output bytes in the recording: its output is [0, End).
func (r *Recording) End() int64 { _, end := r.snap(); return end.out }

// Truncated reports whether the file ends with an incomplete event that was left out.
func (r *Recording) Truncated() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.truncated
}

// Blocks is the block index read at Open (or Refresh). Without an index the error
// wraps ErrNoIndex; a malformed index gives its error (the recording itself stays
// readable).
func (r *Recording) Blocks() ([]IndexEntry, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]IndexEntry(nil), r.blocks...), r.blocksErr
}

func (r *Recording) snap() ([]cursor, cursor) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cps, r.scanned
}

// ReadRange returns the output bytes [from, to), exactly as the session wrote them. It
// reads the file from the checkpoint before from: at most 64 KiB more than the range.
func (r *Recording) ReadRange(from, to int64) ([]byte, error) {
	cps, end := r.snap()
	if from < 0 || to < from || to > end.out {
		return nil, fmt.Errorf("%w: range [%d, %d) of output [0, %d)", ErrRange, from, to, end.out)
	}
	out := make([]byte, 0, to-from)
	if from == to {
		return out, nil
	}
	i := sort.Search(len(cps), func(i int) bool { return cps[i].out > from }) - 1
	err := r.walk(context.Background(), cps[i], end.file, func(ev *event, before cursor) error {
		if ev.kind != "o" {
			return nil
		}
		lo, hi := max(from, before.out), min(to, before.out+int64(len(ev.data)))
		if lo < hi {
			out = append(out, ev.data[lo-before.out:hi-before.out]...)
		}
		if hi >= to {
			return errStop
		}
		return nil
	})
	if err == nil && int64(len(out)) != to-from {
		err = fmt.Errorf("replay: %s changed while reading", r.path)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Events calls fn with each event from the position from (obtained from this
// recording) to the end as it was when Events was called; an output event that from
// cuts is given from the cut. It stops at fn's first error and returns it, and returns
// ctx.Err() when ctx ends first. fn runs on the caller's goroutine.
func (r *Recording) Events(ctx context.Context, from Position, fn func(Event) error) error {
	cps, end := r.snap()
	if from.ev > end.ev {
		return fmt.Errorf("%w: position %v is after the recording's end", ErrRange, from)
	}
	i := sort.Search(len(cps), func(i int) bool { return cps[i].ev > from.ev }) - 1
	return r.walk(ctx, cps[i], end.file, func(ev *event, before cursor) error {
		if before.ev < from.ev {
			return nil
		}
		e := Event{T: ev.t, Kind: ev.kind, Offset: before.out, Cols: ev.cols, Rows: ev.rows}
		data := ev.data
		if before.ev == from.ev && from.skip > 0 && ev.kind == "o" {
			data = data[min(from.skip, int64(len(data))):]
			e.Offset += from.skip
		}
		e.Data = string(data)
		return fn(e)
	})
}

// errStop ends a walk early without an error.
var errStop = errors.New("stop")

// walk calls fn for each event from the cursor c to the file offset limit, with the
// cursor before the event, until fn returns an error (errStop: none) or ctx ends.
func (r *Recording) walk(ctx context.Context, c cursor, limit int64, fn func(ev *event, before cursor) error) error {
	s := r.scanner(c, limit)
	var ev event
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		before := s.cur
		switch err := s.next(&ev); {
		case err == io.EOF:
			return nil
		case err == errTruncated:
			return fmt.Errorf("replay: %s changed while reading", r.path)
		case err != nil:
			return fmt.Errorf("replay: %s: %w", r.path, err)
		}
		if err := fn(&ev, before); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
}

// event is one event as the scanner reads it; data is valid until the next read.
type event struct {
	t          time.Duration
	kind       string
	data       []byte // for "o" the raw output bytes
	cols, rows int
}

// errTruncated: the file ends inside an event (its last line has no newline and does
// not parse, or a "b" event has no "o" event after it).
var errTruncated = errors.New("truncated")

// scanner reads the events of a recording from a cursor.
type scanner struct {
	lr   *lineReader
	p    eventParser
	spec []byte // the data of a "b" event
	cur  cursor // after the last event read
	v3   bool   // times are intervals since the event before; "#" lines are comments
}

// at is the time of an event whose line gave t, after an event at prev.
func (s *scanner) at(prev, t time.Duration) (time.Duration, error) {
	if !s.v3 {
		return max(t, prev), nil
	}
	if prev+t > maxSeconds*time.Second {
		return 0, fmt.Errorf("time %v past %v s", prev+t, maxSeconds)
	}
	return prev + t, nil
}

// skip reports whether a line holds no event: blank, or a v3 comment.
func (s *scanner) skip(b []byte) bool {
	return isBlank(b) || s.v3 && len(b) > 0 && b[0] == '#'
}

func (r *Recording) scanner(c cursor, limit int64) *scanner {
	lr := newLineReader(io.NewSectionReader(r.f, c.file, max(0, limit-c.file)), c.file)
	lr.num = c.line
	return &scanner{lr: lr, cur: c, v3: r.hdr.Version == 3}
}

func lineErr(n int, err error) error { return &lineError{n, err} }

// next reads the next event into ev and moves s.cur after it. It returns io.EOF at the
// end, errTruncated for an event cut short at the end, and other errors (wrapping
// ErrFormat) for malformed lines.
func (s *scanner) next(ev *event) error {
	l, err := s.lr.next(maxLine)
	for err == nil && s.skip(l.b) {
		s.cur.file, s.cur.line = l.end, l.num
		l, err = s.lr.next(maxLine)
	}
	if err != nil {
		return err
	}
	t, err := s.p.parse(l.b)
	if err != nil {
		if !l.terminated {
			return errTruncated
		}
		return lineErr(l.num, err)
	}
	if t, err = s.at(s.cur.t, t); err != nil {
		return lineErr(l.num, err)
	}
	if string(s.p.kind) == "b" {
		if !s.p.isStr {
			return lineErr(l.num, errors.New(`"b" data must be a string`))
		}
		s.spec = append(s.spec[:0], s.p.data...)
		bnum, bt := l.num, t
		if l, err = s.lr.next(maxLine); err == io.EOF {
			return errTruncated
		} else if err != nil {
			return err
		}
		if t, err = s.p.parse(l.b); err != nil {
			if !l.terminated {
				return errTruncated
			}
			return lineErr(l.num, err)
		}
		if t, err = s.at(bt, t); err != nil {
			return lineErr(l.num, err)
		}
		if string(s.p.kind) != "o" || !s.p.isStr {
			return lineErr(l.num, errors.New(`a "b" event must come right before an "o" event`))
		}
		if s.p.data, err = applyPatches(s.p.data, s.spec); err != nil {
			return lineErr(bnum, err)
		}
	}
	*ev = event{t: max(t, s.cur.t), kind: kindString(s.p.kind), data: s.p.data}
	switch ev.kind {
	case "o", "i", "m":
		if !s.p.isStr {
			return lineErr(l.num, fmt.Errorf("%q data must be a string", ev.kind))
		}
	case "r":
		if !s.p.isStr {
			return lineErr(l.num, errors.New(`"r" data must be a string`))
		}
		if ev.cols, ev.rows, err = parseSize(ev.data); err != nil {
			return lineErr(l.num, err)
		}
	}
	s.cur.file, s.cur.line = l.end, l.num
	s.cur.ev++
	s.cur.t = ev.t
	if ev.kind == "o" {
		s.cur.out += int64(len(ev.data))
	}
	return nil
}

func isBlank(b []byte) bool { return skipSpace(b, 0) == len(b) }

// kindString returns the event code as a string, without allocating for the usual ones.
func kindString(b []byte) string {
	switch string(b) {
	case "o":
		return "o"
	case "r":
		return "r"
	case "m":
		return "m"
	case "i":
		return "i"
	case "x":
		return "x"
	}
	return string(b)
}
