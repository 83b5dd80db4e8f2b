package session

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/x/vt"

	"github.com/fleetmux/fleetmux/api"
)

// The screen model is a terminal emulator fed from the scrollback ring, never by the
// read loop: the emulator costs tens of microseconds per scrolled line (about 100 µs
// for a shell prompt).
//
// While a full-screen program may be drawing (the alternate screen is on), the
// feeder goroutine follows the stream at its own pace, a little behind: it waits
// screenDebounce after output so a burst is fed at once, off the path of a quick
// command. On the main screen — a shell and its line output — nothing is rendered
// until someone asks: sessions nobody looks at cost nothing, and the feeder wakes
// only for marks (one of them may switch to the alternate screen).
//
// When it is far behind — more than screenMaxLag bytes or 4 screens of lines — it
// skips ahead to the last 2 screens of lines (at most screenKeep bytes), setting the
// alternate screen as the skipped output left it (the mark scanner records where
// programs switch it). While a flood goes on (more than screenKeep bytes came since
// the last look) the feeder renders nothing: whatever it rendered would be skipped
// again. Screen() catches up synchronously before it snapshots, so a snapshot always
// reflects all output read so far, at a bounded cost.

const (
	screenMaxLag   = 256 << 10
	screenKeep     = 64 << 10
	screenPiece    = 32 << 10
	screenDebounce = 15 * time.Millisecond
	screenPause    = 50 * time.Millisecond // after a skip, let a flood pass
)

// emulator is what the session needs of a terminal emulator.
type emulator interface {
	io.Writer
	Resize(cols, rows int)
	IsAltScreen() bool
	Height() int
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
	// Screen() never reads the emulator's scrollback; keeping one costs a memmove of
	// the whole buffer per scrolled line.
	e.SetScrollbackSize(1)
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
type Cursor = api.Cursor

// Screen is what the terminal shows now, as the API sends it: Text is the screen's
// rows joined by "\n", trailing spaces and trailing empty rows removed.
type Screen = api.Screen

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
	var seen int64 // the output's end at the last look
	for {
		// Take the channel before looking, so no change is missed: on the main
		// screen only a mark (a switch to the alternate screen among them) can
		// change what to do; on the alternate screen any output.
		sc.s.mu.Lock()
		wake := sc.s.follow.note
		sc.s.mu.Unlock()
		alt := sc.altLikely()
		sc.s.mu.Lock()
		if alt {
			wake = sc.s.followedOutputLocked()
		}
		end := sc.s.ring.end
		sc.s.mu.Unlock()
		flood := end-seen > screenKeep
		seen = end
		skipped := false
		if !flood && alt {
			sc.mu.Lock()
			skipped = sc.catchUpLocked(end)
			sc.mu.Unlock()
		}
		pause := screenDebounce
		if skipped || flood {
			pause = screenPause
		}
		select {
		case <-sc.s.stop:
			return
		case <-wake:
		}
		select {
		case <-sc.s.stop:
			return
		case <-time.After(pause):
		}
	}
}

// altLikely reports whether a full-screen program may be drawing: the output last
// switched to the alternate screen, or the emulator is still on it.
func (sc *screen) altLikely() bool {
	sc.s.mu.Lock()
	on := len(sc.s.alt) > 0 && sc.s.alt[len(sc.s.alt)-1].on
	sc.s.mu.Unlock()
	if on {
		return true
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return !sc.done && sc.emu.IsAltScreen()
}

// catchUpLocked feeds output up to end, skipping ahead when far behind. It reports
// whether it skipped.
func (sc *screen) catchUpLocked(end int64) (skipped bool) {
	if sc.done {
		return false
	}
	s := sc.s
	rows := sc.emu.Height()
	s.mu.Lock()
	if start := s.ring.start(); sc.fed < start {
		sc.fed = start
	}
	if lag := end - sc.fed; lag > int64(4*rows) {
		a, b := s.ring.slices(sc.fed, end)
		if lag > screenMaxLag || bytes.Count(a, nl)+bytes.Count(b, nl) > 4*rows {
			to := sc.skipTargetLocked(end, 2*rows)
			if on, ok := s.altAtLocked(to); ok && on != sc.emu.IsAltScreen() {
				if on {
					_, _ = sc.emu.Write([]byte("\x1b[?1049h"))
				} else {
					_, _ = sc.emu.Write([]byte("\x1b[?1049l"))
				}
			}
			sc.fed, skipped = to, true
		}
	}
	s.mu.Unlock()
	buf := make([]byte, 0, min(screenPiece, max(0, end-sc.fed)))
	for sc.fed < end {
		s.mu.Lock()
		if start := s.ring.start(); sc.fed < start {
			sc.fed = start
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

var nl = []byte{'\n'}

// skipTargetLocked is where the last `lines` lines before end start, but no earlier
// than screenKeep bytes before end. Called with s.mu held.
func (sc *screen) skipTargetLocked(end int64, lines int) int64 {
	from := max(end-screenKeep, sc.s.ring.start())
	a, b := sc.s.ring.slices(from, end)
	pos := end
	for _, part := range [][]byte{b, a} {
		for len(part) > 0 {
			i := bytes.LastIndexByte(part, '\n')
			if i < 0 {
				break
			}
			if lines--; lines < 0 {
				return pos - int64(len(part)-i-1)
			}
			pos -= int64(len(part) - i)
			part = part[:i]
		}
		pos -= int64(len(part))
	}
	return from
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
