package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
)

// `fleetmux run NODE/ID` prints the block's output as it arrives, the way ssh does:
// while the run request is in flight it finds the new block (the session's block
// count before the run, plus one), follows the session's raw output from the
// block's start and prints it line by line: rendered (escape sequences and
// carriage-return overwrites resolved, as the block's text has them), or the raw
// bytes with --raw. Until the shell accepts the typed line a block starts where the
// typing did, so leading lines that are the command's echo are dropped (as the
// block's text drops them). A line is printed once its newline arrives: the bytes after the
// block's end (the next prompt) are never printed, since the block's end is known
// only when the run returns. When the run returns, the rest comes from the block's
// rendered text (or, with --raw or a budget-cut text, from the followed bytes up to
// the block's end). A block that finishes before it is found prints as before, all
// at once.

// Backoff of the look for the new block.
const (
	findMinBackoff = 20 * time.Millisecond
	findMaxBackoff = 250 * time.Millisecond
	// drainWait bounds the wait for the followed bytes to reach the block's end.
	drainWait = 5 * time.Second
)

// runResult is the reply of a run request.
type runResult struct {
	r   api.BlockResult
	err error
}

// streamRun runs body in node/id, printing the output to w as it arrives; it
// returns the run's reply (or, with --follow and the timeout passed, the finished
// block's) as runOne prints it, with printed telling whether the text is printed.
func (o *runOptions) streamRun(ctx context.Context, cl *client.Client, node, id string, body api.RunBody, w io.Writer) (r api.BlockResult, printed bool, err error) {
	s, err := cl.Session(ctx, node, id)
	if err != nil {
		return r, false, err
	}
	n := s.Blocks + 1
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	done := make(chan runResult, 1)
	go func() {
		r, err := cl.Run(runCtx, node, id, body)
		done <- runResult{r, err}
	}()

	// Find the block while the run is in flight.
	var start int64 = -1
	var echo []string
	backoff := findMinBackoff
	for start < 0 {
		t := time.NewTimer(backoff)
		select {
		case res := <-done:
			t.Stop()
			return res.r, false, res.err
		case <-t.C:
		}
		backoff = min(2*backoff, findMaxBackoff)
		br, err := cl.Block(ctx, node, id, n, client.BlockQuery{MaxBytes: 1})
		switch {
		case errors.Is(err, client.ErrNotFound):
			continue // not typed yet
		case err != nil:
			res := <-done // the run says what went wrong, if anything did
			return res.r, false, res.err
		case br.Block.Fallback || br.Block.Start < s.OutputOffset:
			// typed into a program: its bytes include the program's echo; or an
			// older block: not this run's
			res := <-done
			return res.r, false, res.err
		}
		start = br.Block.Start
		echo = strings.Split(br.Block.Command, "\n")
	}

	ls := &lineStream{w: w, raw: o.raw, next: start, echo: echo}
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		_, err := cl.FollowChunks(fctx, node, id, start, ls.feed)
		ls.stop(err)
	}()
	defer func() { stopFollow(); <-followed }()

	res := <-done
	r, err = res.r, res.err
	if err != nil {
		stopFollow()
		<-followed
		ls.flushRendered("") // what was printed stays; the error says the rest
		return r, true, err
	}
	if r.Block.N != n {
		// not the block that was followed (an idempotent retry's earlier block)
		return r, false, nil
	}
	if r.Block.State == api.BlockRunning && o.follow {
		wr, werr := o.followToEnd(ctx, cl, node, id, n)
		if werr != nil {
			return r, true, werr
		}
		r = wr
	}
	return r, true, ls.finish(r)
}

// followToEnd waits until block n of node/id finished and returns it.
func (o *runOptions) followToEnd(ctx context.Context, cl *client.Client, node, id string, n int) (api.BlockResult, error) {
	for {
		br, err := cl.Block(ctx, node, id, n, client.BlockQuery{MaxBytes: o.maxOutput})
		if err != nil || br.Block.State != api.BlockRunning {
			return br, err
		}
		if _, err := cl.Wait(ctx, node, id, client.WaitQuery{Until: api.UntilIdle, TimeoutMS: int(api.MaxWait / time.Millisecond)}); err != nil {
			return br, err
		}
	}
}

// errFinished ends the follow once the block's output is all printed.
var errFinished = errors.New("the block's output is printed")

// lineStream prints followed output line by line.
type lineStream struct {
	w   io.Writer
	raw bool

	mu      sync.Mutex
	next    int64    // offset of pend's first byte
	pend    []byte   // bytes after the last line printed
	echo    []string // command lines still to drop when the leading lines echo them
	lines   int      // lines printed
	werr    error    // writing to w failed
	stopped bool     // the follow ended
	closed  bool     // finished: later output is not the block's
	ferr    error    // why, when it failed
	moved   chan struct{}
}

// feed takes a piece of output at offset off (FollowChunks's callback).
func (s *lineStream) feed(off int64, p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.werr != nil {
		return s.werr
	}
	if s.closed {
		return errFinished
	}
	if have := s.next + int64(len(s.pend)); off != have {
		return fmt.Errorf("output at offset %d, want %d", off, have)
	}
	s.pend = append(s.pend, p...)
	if i := bytes.LastIndexByte(s.pend, '\n'); i >= 0 {
		s.emitLocked(s.pend[:i+1])
		s.next += int64(i + 1)
		s.pend = append(s.pend[:0], s.pend[i+1:]...)
	}
	s.signalLocked()
	return s.werr
}

// emitLocked prints complete lines b.
func (s *lineStream) emitLocked(b []byte) {
	if s.werr != nil {
		return
	}
	var out bytes.Buffer
	for line := range bytes.Lines(b) {
		text := renderLine(bytes.TrimSuffix(line, []byte("\n")))
		if len(s.echo) > 0 {
			want := strings.TrimSpace(s.echo[0])
			if want == "" || strings.HasSuffix(strings.TrimSpace(text), want) {
				s.echo = s.echo[1:]
				continue
			}
			s.echo = nil
		}
		if s.raw {
			out.Write(line)
			continue
		}
		out.WriteString(text)
		out.WriteByte('\n')
		s.lines++
	}
	_, s.werr = s.w.Write(out.Bytes())
}

func (s *lineStream) signalLocked() {
	if s.moved != nil {
		close(s.moved)
		s.moved = nil
	}
}

// stop records the follow's end.
func (s *lineStream) stop(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if err != nil && !errors.Is(err, context.Canceled) {
		s.ferr = err
	}
	s.signalLocked()
}

// finish prints the rest of block r: from its text when rendered and whole, else
// from the followed bytes up to its end.
func (s *lineStream) finish(r api.BlockResult) error {
	if !s.raw && r.OmittedBytes == 0 {
		s.flushRendered(r.Text)
		return s.err()
	}
	end := r.Block.End
	deadline := time.NewTimer(drainWait)
	defer deadline.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.closed = true }()
	for s.next+int64(len(s.pend)) < end && !s.stopped {
		ch := make(chan struct{})
		s.moved = ch
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
		case <-deadline.C:
			s.mu.Lock()
			s.stopped = true
		}
	}
	if k := end - s.next; k > 0 {
		rest := s.pend[:min(int64(len(s.pend)), k)]
		if !s.raw && len(rest) > 0 && !bytes.HasSuffix(rest, []byte("\n")) {
			rest = append(rest, '\n')
		}
		s.emitLocked(rest)
		if int64(len(s.pend)) < k && s.werr == nil {
			return fmt.Errorf("the output after offset %d did not arrive (%v): fleetmux block %s %d has it",
				s.next+int64(len(s.pend)), s.ferr, r.Session.Node+"/"+r.Session.ID, r.Block.N)
		}
	}
	return s.werr
}

// flushRendered prints the lines of text after those already printed (text: the
// block's rendered text; "" prints nothing more).
func (s *lineStream) flushRendered(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pend, s.closed = nil, true
	if text == "" || s.werr != nil {
		return
	}
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if s.lines >= len(lines) {
		return
	}
	rest := strings.Join(lines[s.lines:], "")
	if !strings.HasSuffix(rest, "\n") {
		rest += "\n"
	}
	_, s.werr = io.WriteString(s.w, rest)
}

func (s *lineStream) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.werr
}

// renderLine is one line of terminal output as text: escape sequences removed,
// carriage returns and backspaces applied (what is written after a CR overwrites
// the line from its start), other control characters dropped, invalid UTF-8 as
// U+FFFD, trailing spaces trimmed.
func renderLine(b []byte) string {
	var cells []rune
	col := 0
	put := func(r rune) {
		if col < len(cells) {
			cells[col] = r
		} else {
			for len(cells) < col {
				cells = append(cells, ' ')
			}
			cells = append(cells, r)
		}
		col++
	}
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == 0x1b:
			i += escapeLen(b[i:])
			continue
		case c == '\r':
			col = 0
		case c == '\b':
			col = max(col-1, 0)
		case c == '\t':
			for {
				put(' ')
				if col%8 == 0 {
					break
				}
			}
		case c < 0x20 || c == 0x7f:
			// other control characters: nothing shown
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r >= 0x80 && r < 0xa0 { // C1 controls
				i += size
				continue
			}
			put(r)
			i += size
			continue
		}
		i++
	}
	return strings.TrimRight(string(cells), " ")
}

// escapeLen is the length of the escape sequence at the start of b (which starts
// with ESC): CSI, OSC/DCS/APC/PM/SOS up to their terminator, or ESC and one more
// character (with its intermediates). An unterminated one runs to b's end.
func escapeLen(b []byte) int {
	if len(b) < 2 {
		return len(b)
	}
	switch b[1] {
	case '[': // CSI: parameters and intermediates, then a final byte 0x40–0x7e
		for i := 2; i < len(b); i++ {
			if b[i] >= 0x40 && b[i] <= 0x7e {
				return i + 1
			}
		}
		return len(b)
	case ']', 'P', '_', '^', 'X': // strings, ended by BEL or ST (ESC \)
		for i := 2; i < len(b); i++ {
			if b[i] == 0x07 {
				return i + 1
			}
			if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\' {
				return i + 2
			}
		}
		return len(b)
	}
	i := 1
	for i < len(b) && b[i] >= 0x20 && b[i] <= 0x2f { // intermediates
		i++
	}
	if i < len(b) {
		i++
	}
	return i
}
