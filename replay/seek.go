package replay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sort"
	"time"
)

// Position is a point in a recording, between two events or inside an output event.
// Get one from AtTime, AtOffset or AtBlock of the recording it is used with; the zero
// Position is the start of every recording.
type Position struct {
	off  int64         // output bytes before it
	t    time.Duration // the recording's clock at it
	ev   int           // events entirely before it
	skip int64         // bytes of event ev's output before it
}

// Offset is the number of output bytes before the position.
func (p Position) Offset() int64 { return p.off }

// Time is the recording's clock at the position.
func (p Position) Time() time.Duration { return p.t }

func (p Position) String() string { return fmt.Sprintf("offset %d at %v", p.off, p.t) }

// endPos is the position after every event scanned so far.
func endPos(end cursor) Position { return Position{off: end.out, t: end.t, ev: end.ev} }

// AtTime is the position after every event up to and including time d (d past the end
// gives the end). A negative d is an error wrapping ErrRange.
func (r *Recording) AtTime(d time.Duration) (Position, error) {
	cps, end := r.snap()
	if d < 0 {
		return Position{}, fmt.Errorf("%w: negative time %v", ErrRange, d)
	}
	if d >= end.t {
		return endPos(end), nil
	}
	// Every event before cps[i] happened at or before cps[i].t ≤ d.
	i := sort.Search(len(cps), func(i int) bool { return cps[i].t > d }) - 1
	pos := endPos(end)
	err := r.walk(context.Background(), cps[i], end.file, func(ev *event, before cursor) error {
		if ev.t > d {
			pos = Position{off: before.out, t: d, ev: before.ev}
			return errStop
		}
		return nil
	})
	return pos, err
}

// AtOffset is the position before the output byte at offset off: after every event
// that comes before that byte (markers and resizes included), inside the output event
// that holds it when it is not that event's first byte. Its time is that event's. off
// must be within [0, End()]: End() gives the end; anything else is an error wrapping
// ErrRange.
func (r *Recording) AtOffset(off int64) (Position, error) {
	cps, end := r.snap()
	if off < 0 || off > end.out {
		return Position{}, fmt.Errorf("%w: offset %d of output [0, %d]", ErrRange, off, end.out)
	}
	if off == end.out {
		return endPos(end), nil
	}
	// No output event before cps[i] reaches byte off.
	i := sort.Search(len(cps), func(i int) bool { return cps[i].out > off }) - 1
	pos := endPos(end)
	err := r.walk(context.Background(), cps[i], end.file, func(ev *event, before cursor) error {
		if ev.kind == "o" && before.out+int64(len(ev.data)) > off {
			pos = Position{off: off, t: ev.t, ev: before.ev, skip: off - before.out}
			return errStop
		}
		return nil
	})
	return pos, err
}

// AtBlock is the position where block n's output starts (AtOffset of its start in the
// block index, less the header's Offset: in a part of a rotated recording, a block
// that started in an earlier part is ErrRange). Without an index the error wraps ErrNoIndex; a block that is not in it
// gives an error wrapping ErrNoBlock.
func (r *Recording) AtBlock(n int) (Position, error) {
	blocks, err := r.Blocks()
	if err != nil {
		return Position{}, err
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		if b := blocks[i]; b.N == n {
			start := b.Start - r.hdr.Offset
			if start < 0 {
				return Position{}, fmt.Errorf("%w: block %d starts at output offset %d, before this recording's first byte %d (an earlier part, dropped or in another file)", ErrRange, n, b.Start, r.hdr.Offset)
			}
			if end := r.End(); start > end {
				return Position{}, fmt.Errorf("%w: block %d starts at output offset %d, after the recording's end %d", ErrRange, n, b.Start, r.hdr.Offset+end)
			}
			return r.AtOffset(start)
		}
	}
	have := "is empty"
	if len(blocks) > 0 {
		have = fmt.Sprintf("has blocks %d to %d", blocks[0].N, blocks[len(blocks)-1].N)
	}
	return Position{}, fmt.Errorf("%w: %d (the index of %s %s)", ErrNoBlock, n, r.path, have)
}

// Resizer is a terminal (emulator) that can be resized. ScreenAt resizes a term that
// implements it at each resize event; charmbracelet/x/vt's Emulator does.
type Resizer interface {
	Resize(cols, rows int)
}

// ScreenAt writes all output before pos to term at once, in order, without pauses: a
// terminal emulator created with the header's size then shows the screen at pos. When
// term is a Resizer it is resized at each resize event in between. It returns
// ctx.Err() when ctx ends first, and the first error of term.
func (r *Recording) ScreenAt(ctx context.Context, pos Position, term io.Writer) error {
	var resize func(cols, rows int) error
	if rz, ok := term.(Resizer); ok {
		resize = func(cols, rows int) error { rz.Resize(cols, rows); return nil }
	}
	return r.fastForward(ctx, pos, term, resize)
}

// fastForward writes the output before pos to w, in pieces of up to 64 KiB, calling
// resize (when not nil) at each resize event.
func (r *Recording) fastForward(ctx context.Context, pos Position, w io.Writer, resize func(cols, rows int) error) error {
	cps, end := r.snap()
	if pos.ev > end.ev {
		return fmt.Errorf("%w: position %v is after the recording's end", ErrRange, pos)
	}
	if pos.ev == 0 && pos.skip == 0 {
		return nil
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	err := r.walk(ctx, cps[0], end.file, func(ev *event, before cursor) error {
		switch {
		case before.ev > pos.ev || before.ev == pos.ev && pos.skip == 0:
			return errStop
		case before.ev == pos.ev:
			_, err := bw.Write(ev.data[:min(pos.skip, int64(len(ev.data)))])
			if err == nil {
				err = errStop
			}
			return err
		}
		switch ev.kind {
		case "o":
			_, err := bw.Write(ev.data)
			return err
		case "r":
			if resize != nil {
				if err := bw.Flush(); err != nil {
					return err
				}
				return resize(ev.cols, ev.rows)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}
