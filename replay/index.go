package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// IndexEntry is one finished block in a recording's block index.
type IndexEntry struct {
	N        int    `json:"n"` // the block number, 1-based per session
	Command  string `json:"command"`
	Cwd      string `json:"cwd"`
	ExitCode *int   `json:"exit_code,omitempty"` // absent when unknown
	// Note says why a block has no exit code (api's exit_code_note sentences, e.g.
	// the policy rule that denied it); absent when it has one.
	Note       string    `json:"note,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Start and End are the block's output range [Start, End) as output offsets.
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	// Fallback: a command typed into a program without shell integration.
	Fallback bool `json:"fallback,omitempty"`
	// T and TEnd are the block's start and end in seconds since the recording started.
	T    float64 `json:"t"`
	TEnd float64 `json:"t_end"`
}

func (e *IndexEntry) validate() error {
	switch {
	case e.N < 1:
		return fmt.Errorf("block number %d: want 1 or more", e.N)
	case e.Start < 0 || e.End < e.Start:
		return fmt.Errorf("block %d: bad output range [%d, %d)", e.N, e.Start, e.End)
	case e.T < 0 || e.TEnd < e.T || e.TEnd > maxSeconds:
		return fmt.Errorf("block %d: bad times %v…%v", e.N, e.T, e.TEnd)
	}
	return nil
}

// IndexPath is the path of the block index of the recording castPath: NAME.cast has
// its index in NAME.blocks.jsonl; a path without the .cast suffix gets .blocks.jsonl
// appended.
func IndexPath(castPath string) string {
	return strings.TrimSuffix(castPath, ".cast") + ".blocks.jsonl"
}

// IndexWriter appends entries to a block index: one JSON line per entry, written with
// one Write call each (no buffering, so an entry is in the file once Append returns).
// It is safe for concurrent use.
type IndexWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewIndexWriter returns an IndexWriter that appends to w.
func NewIndexWriter(w io.Writer) *IndexWriter { return &IndexWriter{w: w} }

// Append writes e as one line. An invalid entry (N < 1, a bad range or bad times) is
// refused and nothing is written.
func (iw *IndexWriter) Append(e IndexEntry) error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("replay: index entry: %w", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b) // one line, newline included
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return fmt.Errorf("replay: index entry: %w", err)
	}
	iw.mu.Lock()
	defer iw.mu.Unlock()
	if _, err := iw.w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("replay: write index: %w", err)
	}
	return nil
}

// ReadIndex reads a block index. A last line without its newline that does not parse is
// what a crash mid-write leaves: it is dropped, without an error. Any other line that
// does not parse, or holds an invalid entry, is an error (wrapping ErrFormat) that
// gives its line number. Blank lines are skipped; unknown fields are ignored.
func ReadIndex(r io.Reader) ([]IndexEntry, error) { return readIndex(r, "index") }

func readIndex(r io.Reader, name string) ([]IndexEntry, error) {
	lr := newLineReader(r, 0)
	var out []IndexEntry
	for {
		l, err := lr.next(maxLine)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("replay: %s: %w", name, err)
		}
		if isBlank(l.b) {
			continue
		}
		var e IndexEntry
		if err := json.Unmarshal(l.b, &e); err != nil {
			if !l.terminated {
				return out, nil // truncated by a crash
			}
			return out, fmt.Errorf("replay: %s: %w", name, &lineError{l.num, err})
		}
		if err := e.validate(); err != nil {
			return out, fmt.Errorf("replay: %s: %w", name, &lineError{l.num, err})
		}
		out = append(out, e)
	}
}

// OpenIndex reads the block index of the recording castPath (see IndexPath). A missing
// index is an error wrapping both ErrNoIndex and fs.ErrNotExist.
func OpenIndex(castPath string) ([]IndexEntry, error) {
	p := IndexPath(castPath)
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w for %s: %w", ErrNoIndex, castPath, err)
		}
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	return readIndex(f, p)
}

// lineError is a malformed line of a recording or an index. It wraps ErrFormat.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string   { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() []error { return []error{ErrFormat, e.err} }

// line is one line of a file, without its newline.
type line struct {
	b          []byte // valid until the next call of next
	start      int64  // file offset of its first byte
	end        int64  // file offset after its newline (or its last byte)
	num        int    // 1-based line number
	terminated bool   // it ended with a newline
}

// lineReader splits a reader into lines, counting offsets and line numbers.
type lineReader struct {
	br   *bufio.Reader
	pos  int64 // offset of the next line
	num  int   // number of the last line returned
	long []byte
}

func newLineReader(r io.Reader, pos int64) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 32<<10), pos: pos}
}

// next returns the next line, io.EOF at the end, or an error for a line longer than max.
func (lr *lineReader) next(max int) (line, error) {
	b, err := lr.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		lr.long = append(lr.long[:0], b...)
		for err == bufio.ErrBufferFull {
			if len(lr.long) > max {
				return line{}, &lineError{lr.num + 1, fmt.Errorf("longer than %d bytes", max)}
			}
			b, err = lr.br.ReadSlice('\n')
			lr.long = append(lr.long, b...)
		}
		b = lr.long
	}
	if err != nil && err != io.EOF {
		return line{}, err
	}
	if len(b) == 0 {
		return line{}, io.EOF
	}
	if len(b) > max+1 {
		return line{}, &lineError{lr.num + 1, fmt.Errorf("longer than %d bytes", max)}
	}
	lr.num++
	l := line{b: b, start: lr.pos, end: lr.pos + int64(len(b)), num: lr.num}
	lr.pos = l.end
	if b[len(b)-1] == '\n' {
		l.b, l.terminated = b[:len(b)-1], true
	}
	return l, nil
}
