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
// The emulator itself (a few hundred KiB with its parser) exists only while it is
// needed: it is built when a screen is asked for or a program switches to the
// alternate screen, from the ring (see buildLocked), and dropped screenDrop after the
// last look once the main screen is back. While a full-screen program may be drawing
// (the alternate screen is on), a feeder goroutine follows the stream at its own
// pace, a little behind: it waits screenDebounce after output so a burst is fed at
// once, off the path of a quick command; it starts at the switch (the mode mark) and
// returns once the main screen is back. On the main screen — a shell and its line
// output — nothing is rendered until someone asks: sessions nobody looks at cost
// neither an emulator nor a goroutine.
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
	s *Session
	// mu guards emu, fed, done and used; held while feeding (never by the read loop).
	mu  sync.Mutex
	emu emulator // nil until a screen is asked for or a program switches to the alternate screen (see build)
	fed int64    // next output offset to feed
	// used is when the screen was last asked for; drop is armed while emu is built
	// on the main screen, to drop it screenDrop after the last look.
	used time.Time
	drop *time.Timer
	done bool
	// feeding: the feeder goroutine runs (guarded by s.mu, not mu).
	feeding bool
}

// screenDrop is how long an emulator built for a look at the main screen is kept
// after the last look: a session somebody watches keeps it, an idle one costs its
// ring only. A later look builds it again from the ring.
const screenDrop = 30 * time.Second

func newScreen(s *Session, cols, rows int) *screen { return &screen{s: s} }

// buildLocked makes the emulator when there is none, at the session's size, fed
// from the oldest output the ring holds (catchUpLocked then skips to the last
// screens of it, as after a flood), with the alternate screen as that output left
// it. Called with mu held; reports false once the screen is closed.
func (sc *screen) buildLocked() bool {
	if sc.done {
		return false
	}
	if sc.emu != nil {
		return true
	}
	s := sc.s
	s.mu.Lock()
	cols, rows, from := s.cols, s.rows, s.ring.Start()
	on, _ := s.altAtLocked(from)
	s.mu.Unlock()
	sc.emu, sc.fed = newVTEmulator(cols, rows), from
	if on {
		_, _ = sc.emu.Write([]byte("\x1b[?1049h"))
	}
	return true
}

// altOnLocked starts the feeder when the output switched to the alternate screen
// (blocks.go, the mode mark): a full-screen program draws, and the emulator follows
// it from now on. Called with s.mu held.
func (sc *screen) altOnLocked() {
	if sc.feeding || sc.s.closed {
		return
	}
	sc.feeding = true
	sc.s.wg.Add(1)
	go sc.feedLoop()
}

// feedLoop follows the output while a full-screen program may be drawing (the
// alternate screen is on), then returns: on the main screen nothing is rendered
// until someone asks, and no goroutine waits.
func (sc *screen) feedLoop() {
	defer sc.s.wg.Done()
	var seen int64 // the output's end at the last look
	for {
		// Take the channel before looking, so no output is missed.
		sc.s.mu.Lock()
		wake := sc.s.followedOutputLocked()
		end := sc.s.ring.End()
		sc.s.mu.Unlock()
		flood := end-seen > screenKeep
		seen = end
		skipped := false
		sc.mu.Lock()
		if !flood && sc.buildLocked() {
			skipped = sc.catchUpLocked(end)
		}
		alt := !sc.done && sc.emu != nil && sc.emu.IsAltScreen()
		sc.mu.Unlock()
		sc.s.mu.Lock()
		if !sc.s.altLastLocked() && (!alt || flood) {
			// Back on the main screen (caught up, or a flood Screen will skip): stop
			// until the next switch.
			sc.feeding = false
			sc.s.mu.Unlock()
			sc.mu.Lock()
			sc.armDropLocked()
			sc.mu.Unlock()
			return
		}
		sc.s.mu.Unlock()
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

// altLastLocked reports whether the output's latest switch was to the alternate
// screen. Called with s.mu held.
func (s *Session) altLastLocked() bool { return len(s.alt) > 0 && s.alt[len(s.alt)-1].on }

// armDropLocked (re)arms the timer that drops the emulator screenDrop after the last
// look. Called with mu held.
func (sc *screen) armDropLocked() {
	if sc.done || sc.emu == nil {
		return
	}
	if sc.drop == nil {
		sc.drop = time.AfterFunc(screenDrop, sc.dropIdle)
	} else {
		sc.drop.Reset(screenDrop)
	}
}

// dropIdle drops the emulator of the main screen when nobody looked for screenDrop
// and no full-screen program draws; it runs on the timer's goroutine.
func (sc *screen) dropIdle() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.done || sc.emu == nil {
		return
	}
	sc.s.mu.Lock()
	busy := sc.feeding || sc.s.altLastLocked()
	sc.s.mu.Unlock()
	if busy || sc.emu.IsAltScreen() {
		return // the feeder arms the timer again when the program is done
	}
	if left := screenDrop - time.Since(sc.used); left > 0 {
		sc.drop.Reset(left)
		return
	}
	sc.emu.close()
	sc.emu = nil
}

// catchUpLocked feeds output up to end, skipping ahead when far behind. It reports
// whether it skipped.
func (sc *screen) catchUpLocked(end int64) (skipped bool) {
	if sc.done || sc.emu == nil {
		return false
	}
	s := sc.s
	rows := sc.emu.Height()
	s.mu.Lock()
	if start := s.ring.Start(); sc.fed < start {
		sc.fed = start
	}
	if lag := end - sc.fed; lag > int64(4*rows) {
		a, b := s.ring.Slices(sc.fed, end)
		lines := 4 * rows
		if repositions(a, b) {
			lines = screenDrawRows * rows // a program drawing in place: see repositions
		}
		if lag > screenMaxLag || bytes.Count(a, nl)+bytes.Count(b, nl) > lines {
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
		if start := s.ring.Start(); sc.fed < start {
			sc.fed = start
		}
		a, b := s.ring.Slices(sc.fed, min(end, sc.fed+screenPiece))
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

// screenDrawRows is how many screens of lines the emulator renders before it skips
// output that moves the cursor back (repositions): such output draws in place
// rather than scrolling, and what it draws later relies on what it drew before (a
// diff renderer such as Claude Code's moves over cells it knows are blank), so a
// skip leaves stale cells on the screen. Past it (or past screenMaxLag bytes) the
// cost bound wins.
const screenDrawRows = 32

// repositions reports whether the output a then b (a ring's two slices) holds an
// escape sequence that moves the cursor up or to an absolute place, sets a scroll
// region or restores a saved cursor: output that does not just run down the
// screen. A sequence cut by the slices' seam is found when it is at most 32 bytes.
func repositions(a, b []byte) bool {
	if repositionsIn(a) || repositionsIn(b) {
		return true
	}
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	seam := make([]byte, 0, 64)
	seam = append(seam, a[max(0, len(a)-32):]...)
	seam = append(seam, b[:min(len(b), 32)]...)
	return repositionsIn(seam)
}

// repositionsIn is repositions of one slice: ESC M (reverse index), ESC 8
// (restore cursor), or a CSI sequence ending in A (up), F (previous line), H or
// f (position), d (row), r (scroll region), T (scroll down) or u (restore cursor).
func repositionsIn(p []byte) bool {
	for {
		i := bytes.IndexByte(p, 0x1b)
		if i < 0 || i+1 >= len(p) {
			return false
		}
		p = p[i+1:]
		switch p[0] {
		case 'M', '8':
			return true
		case '[':
			j := 1
			for j < len(p) && p[j] >= 0x30 && p[j] <= 0x3f { // parameters
				j++
			}
			for j < len(p) && p[j] >= 0x20 && p[j] <= 0x2f { // intermediates
				j++
			}
			if j < len(p) && bytes.IndexByte([]byte("AFHfdrTu"), p[j]) >= 0 {
				return true
			}
		}
	}
}

// skipTargetLocked is where the last `lines` lines before end start, but no earlier
// than screenKeep bytes before end. Called with s.mu held.
func (sc *screen) skipTargetLocked(end int64, lines int) int64 {
	from := max(end-screenKeep, sc.s.ring.Start())
	a, b := sc.s.ring.Slices(from, end)
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
	end := sc.s.ring.End()
	sc.s.mu.Unlock()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.emu == nil {
		return // built at the new size when needed
	}
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
		if sc.drop != nil {
			sc.drop.Stop()
		}
		if sc.emu != nil {
			sc.emu.close()
			sc.emu = nil
		}
	}
}

// Screen returns the current screen as text, with the cursor, the alt-screen flag and
// the program in front (inFront). It
// reflects all output read so far (it may have to render up to screenMaxLag bytes).
func (s *Session) Screen() (Screen, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Screen{}, ErrClosed
	}
	end := s.ring.End()
	out := Screen{Cols: s.cols, Rows: s.rows, WaitingInput: s.waiting && !s.exited, Echo: s.echo}
	s.mu.Unlock()
	out.Program, out.FullScreen = s.inFront()

	sc := s.screen
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !sc.buildLocked() {
		return Screen{}, ErrClosed
	}
	sc.used = time.Now()
	sc.armDropLocked()
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
