package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fleetmux/fleetmux/internal/delay"
)

// Viewers follow the output stream live. A viewer is only a cursor into the scrollback
// ring: the read loop never copies into it or waits for it, so any number of viewers
// cost the PTY nothing. A viewer that falls more than MaxLag bytes behind is either
// dropped with ErrViewerDropped, or (SkipAhead) jumps forward and reports how much it
// skipped; either way it never slows the session or the other viewers.

// ErrViewerDropped is returned by Viewer.Next once a slow viewer has been dropped.
var ErrViewerDropped = errors.New("session: viewer dropped")

// DefaultViewerMaxLag is the default lag bound of a viewer.
const DefaultViewerMaxLag = 1 << 20

// ViewerOptions configure a viewer.
type ViewerOptions struct {
	// MaxLag is how far (bytes) the viewer may fall behind the newest output before it
	// is dropped or skips ahead; default DefaultViewerMaxLag, capped by the scrollback.
	MaxLag int64
	// SkipAhead makes a lagging viewer jump to the newest MaxLag/2 bytes (reported in
	// Chunk.Skipped) instead of being dropped.
	SkipAhead bool
	// MaxChunk bounds the bytes returned by one Next call (default 64 KiB).
	MaxChunk int
	// Linger, when positive, batches the output of a command that a Run (or
	// WaitBlock) caller is waiting for: output that comes within Linger of the
	// viewer's last chunk waits for the rest of that span (or for MaxChunk bytes)
	// and comes as one chunk, so the command's echo, end and next prompt do not wake
	// the viewer one by one while the caller waits for them. A viewer with a Linger
	// is also a follower (see Session.Followed): while a caller waits, even the
	// first output after a quiet spell reaches it up to FollowDelay late. Nothing
	// waits when no caller is waiting (typing into an attached terminal is never
	// delayed) or once the session has exited.
	Linger time.Duration
}

// Chunk is a piece of output at an absolute offset.
type Chunk struct {
	Offset  int64
	Data    []byte
	Skipped int64 // bytes passed over just before Offset (SkipAhead viewers)
}

// Viewer follows a session's output. Next is meant for one goroutine.
type Viewer struct {
	s    *Session
	opts ViewerOptions
	next int64
	err  error
	last time.Time // when Next last returned a chunk (Linger)
}

// Subscribe returns a viewer positioned at offset from (negative: the current end).
func (s *Session) Subscribe(from int64, opts ViewerOptions) *Viewer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if from < 0 || from > s.ring.End() {
		from = s.ring.End()
	}
	size := int64(s.ring.Size())
	if opts.MaxLag <= 0 {
		opts.MaxLag = DefaultViewerMaxLag
	}
	opts.MaxLag = min(opts.MaxLag, size)
	if opts.MaxChunk <= 0 {
		opts.MaxChunk = 64 << 10
	}
	return &Viewer{s: s, opts: opts, next: from}
}

// Offset is the offset of the next byte the viewer will return.
func (v *Viewer) Offset() int64 { return v.next }

// Next blocks until output past the viewer's offset exists, then returns it. It
// returns io.EOF once the session has exited (or closed) and everything was read,
// ErrViewerDropped (wrapped with the reason) when the viewer lagged too far, and
// ctx.Err() when ctx is done.
func (v *Viewer) Next(ctx context.Context) (Chunk, error) {
	s := v.s
	for {
		if v.err != nil {
			return Chunk{}, v.err
		}
		s.mu.Lock()
		c, ok, wait, err := v.stepLocked()
		var ch chan struct{}
		if !ok && wait == 0 && err == nil {
			if v.opts.Linger > 0 {
				ch = s.followedOutputLocked() // a follower: see Followed
			} else {
				ch = s.changedLocked()
			}
		}
		s.mu.Unlock()
		switch {
		case ok || err != nil:
			return c, err
		case wait > 0:
			if err := delay.Sleep(ctx, wait); err != nil {
				return Chunk{}, err
			}
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Chunk{}, ctx.Err()
		}
	}
}

// TryNext is Next without waiting, for a follower run on demand (Config.Notify):
// ok is true with a chunk; otherwise, when wait is positive, a Linger holds back
// output that is there (ask again after wait), and when it is zero nothing is there
// yet (the next change calls Notify). err is Next's: io.EOF once the session has
// exited (or closed) and everything was read, ErrViewerDropped.
func (v *Viewer) TryNext() (c Chunk, ok bool, wait time.Duration, err error) {
	if v.err != nil {
		return Chunk{}, false, 0, v.err
	}
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return v.stepLocked()
}

// stepLocked is one look at the ring (Session.mu held): a chunk (ok), how long a
// Linger holds back output that is there (wait), or nothing new yet (neither).
func (v *Viewer) stepLocked() (c Chunk, ok bool, wait time.Duration, err error) {
	s := v.s
	end, start := s.ring.End(), s.ring.Start()
	var skipped int64
	if lag := end - v.next; lag > v.opts.MaxLag || v.next < start {
		if !v.opts.SkipAhead {
			v.err = fmt.Errorf("%w: %d bytes behind the newest output at offset %d (limit %d)", ErrViewerDropped, lag, v.next, v.opts.MaxLag)
			return Chunk{}, false, 0, v.err
		}
		to := max(start, end-v.opts.MaxLag/2)
		skipped, v.next = to-v.next, to
	}
	finished := s.exited || s.closed
	if v.next < end {
		if wait := v.linger(end, finished); wait > 0 && skipped == 0 {
			return Chunk{}, false, wait, nil
		}
		data, _ := readScrollback(s.ring, v.next, v.opts.MaxChunk)
		c := Chunk{Offset: v.next, Data: data, Skipped: skipped}
		v.next += int64(len(data))
		if v.opts.Linger > 0 {
			v.last = time.Now()
		}
		return c, true, 0, nil
	}
	if finished {
		v.err = io.EOF
		return Chunk{}, false, 0, io.EOF
	}
	return Chunk{}, false, 0, nil
}

// linger is how much longer Next holds back the output up to end (0: return it now).
func (v *Viewer) linger(end int64, finished bool) time.Duration {
	if v.opts.Linger <= 0 || finished || end-v.next >= int64(v.opts.MaxChunk) || v.last.IsZero() || !v.s.Awaited() {
		return 0
	}
	return time.Until(v.last.Add(v.opts.Linger))
}
