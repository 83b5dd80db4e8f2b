package replay

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// DefaultMaxIdle is the longest pause a Player makes unless told otherwise.
const DefaultMaxIdle = 2 * time.Second

// Player plays a recording in real time (scaled). The zero Player plays from the start
// at normal speed with pauses capped at DefaultMaxIdle.
type Player struct {
	// Speed scales time: 2 plays twice as fast (0: 1). It must be positive.
	Speed float64
	// MaxIdle caps each pause between events, measured in recording time (0:
	// DefaultMaxIdle; negative: no cap).
	MaxIdle time.Duration
	// From is where playing starts: everything before it is written at once, then
	// the rest with its timing (zero: the start).
	From Position
	// Resize writes each resize event as the xterm sequence CSI 8;ROWS;COLS t, which
	// asks the terminal to resize its window (default off: most terminals ignore it or
	// should not be resized by a replay).
	Resize bool
}

// Play writes rec's output to w: everything before p.From at once, then each event when
// it is due, with pauses scaled by Speed and capped by MaxIdle. It waits with timers
// (real time) and returns ctx.Err() as soon as ctx ends, or the first error of w. A
// Write to w that blocks is not interrupted by ctx. Play does not change p.
func (p Player) Play(ctx context.Context, rec *Recording, w io.Writer) error {
	speed := p.Speed
	if speed == 0 {
		speed = 1
	}
	if speed < 0 || math.IsNaN(speed) || math.IsInf(speed, 0) {
		return fmt.Errorf("replay: bad speed %v: want a positive number", p.Speed)
	}
	maxIdle := p.MaxIdle
	if maxIdle == 0 {
		maxIdle = DefaultMaxIdle
	}
	var resize func(cols, rows int) error
	if p.Resize {
		var buf []byte
		resize = func(cols, rows int) error {
			buf = append(buf[:0], "\x1b[8;"...)
			buf = strconv.AppendInt(buf, int64(rows), 10)
			buf = append(buf, ';')
			buf = strconv.AppendInt(buf, int64(cols), 10)
			buf = append(buf, 't')
			_, err := w.Write(buf)
			return err
		}
	}
	if err := rec.fastForward(ctx, p.From, w, resize); err != nil {
		return playErr(ctx, err)
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	start := time.Now()
	var virt time.Duration // recording time played since From, pauses capped
	prev := p.From.t
	err := rec.Events(ctx, p.From, func(ev Event) error {
		gap := ev.T - prev
		prev = ev.T
		if maxIdle > 0 && gap > maxIdle {
			gap = maxIdle
		}
		virt += gap
		if wait := time.Until(start.Add(time.Duration(float64(virt) / speed))); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		}
		switch ev.Kind {
		case "o":
			_, err := io.WriteString(w, ev.Data)
			return err
		case "r":
			if resize != nil {
				return resize(ev.Cols, ev.Rows)
			}
		}
		return nil
	})
	return playErr(ctx, err)
}

// playErr returns ctx's error as it is, and wraps others.
func playErr(ctx context.Context, err error) error {
	if err == nil || err == ctx.Err() {
		return err
	}
	return fmt.Errorf("replay: play: %w", err)
}
