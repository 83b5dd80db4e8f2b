package session

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/x/vt"
)

// The screen model is a terminal emulator fed from the scrollback ring by its own
// goroutine, never by the read loop: the emulator renders only ~1.5 MB/s of scrolling
// output, so it follows the stream at its own pace and, when it falls more than
// screenMaxLag behind, skips ahead to the last screenKeep bytes (carrying over whether
// the alternate screen is on). Screen() catches up synchronously before it snapshots,
// so a snapshot always reflects all output read so far.

const (
	screenMaxLag = 256 << 10
	screenKeep   = 64 << 10
	screenPiece  = 32 << 10
	screenPause  = 50 * time.Millisecond // after a skip, let a flood pass
)

// emulator is what the session needs of a terminal emulator.
type emulator interface {
	io.Writer
	Resize(cols, rows int)
	IsAltScreen() bool
	lines() []string
	cursor() (row, col int)
	close()
}

// vtEmulator adapts charmbracelet/x/vt, draining its replies (it blocks in Write when
// a program queries the terminal and nobody reads them).
type vtEmulator struct {
	*vt.Emulator
	drained chan struct{}
}

var _ emulator = (*vtEmulator)(nil)

func newVTEmulator(cols, rows int) *vtEmulator {
	e := &vtEmulator{Emulator: vt.NewEmulator(cols, rows), drained: make(chan struct{})}
	go func() {
		defer close(e.drained)
		_, _ = io.Copy(io.Discard, e.Emulator)
	}()
	return e
}

func (e *vtEmulator) lines() []string {
	rows, cols := e.Height(), e.Width()
	out := make([]string, rows)
	var b strings.Builder
	for y := 0; y < rows; y++ {
		b.Reset()
		pending := 0
		for x := 0; x < cols; x++ {
			c := e.CellAt(x, y)
			switch {
			case c == nil:
				pending++
			case c.IsZero(): // the second half of a wide character
			case c.Content == "" || c.Content == " ":
				pending++
			default:
				for ; pending > 0; pending-- {
					b.WriteByte(' ')
				}
				b.WriteString(c.Content)
			}
		}
		out[y] = b.String()
	}
	return out
}

func (e *vtEmulator) cursor() (row, col int) {
	p := e.CursorPosition()
	return p.Y, p.X
}

// close ends the drain goroutine. It closes the reply pipe's write side rather than
// calling Emulator.Close, which races with a concurrent Read on its closed flag.
func (e *vtEmulator) close() {
	if pw, ok := e.InputPipe().(*io.PipeWriter); ok {
		_ = pw.CloseWithError(io.EOF)
	} else {
		_ = e.Close()
	}
	<-e.drained
}

// Cursor is a position on the screen, 0-based.
type Cursor struct {
	Row int `json:"row"`
	Col int `json:"col"`
}

// Screen is what the terminal shows now.
type Screen struct {
	// Text is the screen's rows joined by "\n", trailing spaces and trailing empty
	// rows removed.
	Text         string `json:"text"`
	Cursor       Cursor `json:"cursor"`
	AltScreen    bool   `json:"alt_screen"`
	Cols         int    `json:"cols"`
	Rows         int    `json:"rows"`
	WaitingInput bool   `json:"waiting_input"`
	Echo         bool   `json:"echo"`
}

type screen struct {
	s    *Session
	mu   sync.Mutex // guards emu and fed; held while feeding (never by the read loop)
	emu  emulator
	fed  int64 // next output offset to feed
	done bool
}

func newScreen(s *Session, cols, rows int) *screen {
	return &screen{s: s, emu: newVTEmulator(cols, rows)}
}

// feedLoop follows the output until the session stops.
func (sc *screen) feedLoop() {
	defer sc.s.wg.Done()
	for {
		sc.s.mu.Lock()
		ch, end := sc.s.changed, sc.s.ring.end
		sc.s.mu.Unlock()
		sc.mu.Lock()
		skipped := sc.catchUpLocked(end)
		sc.mu.Unlock()
		if skipped {
			select {
			case <-sc.s.stop:
				return
			case <-time.After(screenPause):
			}
			continue
		}
		select {
		case <-sc.s.stop:
			return
		case <-ch:
		}
	}
}

// catchUpLocked feeds output up to end, skipping ahead when far behind. It reports
// whether it skipped.
func (sc *screen) catchUpLocked(end int64) (skipped bool) {
	if sc.done {
		return false
	}
	buf := make([]byte, 0, screenPiece)
	for sc.fed < end {
		s := sc.s
		s.mu.Lock()
		if start := s.ring.start(); sc.fed < start {
			sc.fed = start
		}
		if end-sc.fed > screenMaxLag {
			to := end - screenKeep
			sc.skipLocked(sc.fed, to)
			sc.fed, skipped = to, true
		}
		a, b := s.ring.slices(sc.fed, min(end, sc.fed+screenPiece))
		buf = append(append(buf[:0], a...), b...)
		s.mu.Unlock()
		if len(buf) == 0 {
			break
		}
		_, _ = sc.emu.Write(buf)
		sc.fed += int64(len(buf))
	}
	return skipped
}

// Alternate screen switches, looked for in skipped output.
var altSeqs = [...]string{"\x1b[?1049h", "\x1b[?1049l", "\x1b[?1047h", "\x1b[?1047l", "\x1b[?47h", "\x1b[?47l"}

// skipLocked passes over [from, to) without rendering it, but keeps the alternate
// screen state the skipped output left. Called with s.mu held.
func (sc *screen) skipLocked(from, to int64) {
	a, b := sc.s.ring.slices(from, to)
	best, on := -1, false
	for i, part := range [][]byte{a, b} {
		for _, seq := range altSeqs {
			if j := bytes.LastIndex(part, []byte(seq)); j >= 0 && i*len(a)+j > best {
				best, on = i*len(a)+j, strings.HasSuffix(seq, "h")
			}
		}
	}
	switch {
	case best < 0:
	case on && !sc.emu.IsAltScreen():
		_, _ = sc.emu.Write([]byte("\x1b[?1049h"))
	case !on && sc.emu.IsAltScreen():
		_, _ = sc.emu.Write([]byte("\x1b[?1049l"))
	}
}

func (sc *screen) resize(cols, rows int) {
	sc.s.mu.Lock()
	end := sc.s.ring.end
	sc.s.mu.Unlock()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.catchUpLocked(end)
	if !sc.done {
		sc.emu.Resize(cols, rows)
	}
}

func (sc *screen) close() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !sc.done {
		sc.done = true
		sc.emu.close()
	}
}

// Screen returns the current screen as text, with the cursor and alt-screen flag. It
// reflects all output read so far (it may have to render up to screenMaxLag bytes).
func (s *Session) Screen() (Screen, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Screen{}, ErrClosed
	}
	end := s.ring.end
	out := Screen{Cols: s.cols, Rows: s.rows, WaitingInput: s.waiting && !s.exited, Echo: s.echo}
	s.mu.Unlock()

	sc := s.screen
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.done {
		return Screen{}, ErrClosed
	}
	sc.catchUpLocked(end)
	lines := sc.emu.lines()
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	n := len(lines)
	for n > 0 && lines[n-1] == "" {
		n--
	}
	out.Text = strings.Join(lines[:n], "\n")
	out.Cursor.Row, out.Cursor.Col = sc.emu.cursor()
	out.AltScreen = sc.emu.IsAltScreen()
	return out, nil
}
