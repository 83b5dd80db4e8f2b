package session

import (
	"errors"
	"fmt"
)

// ErrTruncated is matched by errors for reads of output that has already left the
// scrollback ring (the caller must get it from a recording instead).
var ErrTruncated = errors.New("session: output no longer in scrollback")

// TruncatedError reports a read below the oldest offset still held.
type TruncatedError struct {
	From   int64 // the offset asked for
	Oldest int64 // the oldest offset still held
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("session: output at offset %d no longer in scrollback (oldest held: %d)", e.From, e.Oldest)
}

func (e *TruncatedError) Unwrap() error { return ErrTruncated }

// ring is a circular buffer of the newest output bytes, addressed by absolute offset in
// the session's output stream. It grows as output arrives, up to its size, and then
// wraps: an idle session with a prompt or two holds a few hundred bytes, not its
// whole scrollback. Not safe for concurrent use: the session mutex guards it.
type ring struct {
	buf  []byte // len(buf) bytes held; cap grows by doubling up to max
	max  int    // the most bytes held
	base int64  // offset of buf[0] before the first wrap (set at the first write: a ring may start at any end, as a reattached session's does)
	end  int64  // absolute offset one past the newest byte
}

// ringMinGrow is the smallest allocation of a growing ring.
const ringMinGrow = 512

func newRing(size int) *ring { return &ring{max: size} }

// size is the most bytes the ring holds (the scrollback's size).
func (r *ring) size() int { return r.max }

// start is the oldest absolute offset still held.
func (r *ring) start() int64 { return r.end - int64(len(r.buf)) }

// pos is the index in buf of offset o (start <= o < end).
func (r *ring) pos(o int64) int { return int((o - r.base) % int64(len(r.buf))) }

// write appends p, overwriting the oldest bytes once the ring is full.
func (r *ring) write(p []byte) {
	if len(p) == 0 {
		return
	}
	if len(r.buf) == 0 {
		r.base = r.end
	}
	if len(r.buf) < r.max { // still growing: append what fits
		k := min(len(p), r.max-len(r.buf))
		if need := len(r.buf) + k; need > cap(r.buf) {
			nb := make([]byte, len(r.buf), min(r.max, max(need, 2*cap(r.buf), ringMinGrow)))
			copy(nb, r.buf)
			r.buf = nb
		}
		r.buf = append(r.buf, p[:k]...)
		r.end += int64(k)
		p = p[k:]
		if len(p) == 0 {
			return
		}
	}
	n := len(r.buf)
	r.end += int64(len(p))
	if len(p) > n {
		p = p[len(p)-n:]
	}
	i := r.pos(r.end - int64(len(p)))
	k := copy(r.buf[i:], p)
	copy(r.buf, p[k:])
}

// slices returns the held bytes in [from, to) as at most two slices aliasing the ring.
// The range must be within [start, end].
func (r *ring) slices(from, to int64) (a, b []byte) {
	if from >= to {
		return nil, nil
	}
	n := len(r.buf)
	ps := r.pos(from)
	if l := int(to - from); ps+l <= n {
		return r.buf[ps : ps+l], nil
	}
	return r.buf[ps:], r.buf[:r.pos(to-1)+1]
}

// read copies up to max bytes starting at from into a new slice. It fails with a
// *TruncatedError when from is older than the ring holds; from beyond end yields nil.
func (r *ring) read(from int64, max int) ([]byte, error) {
	if from < r.start() {
		return nil, &TruncatedError{From: from, Oldest: r.start()}
	}
	if from >= r.end || max <= 0 {
		return nil, nil
	}
	to := min(r.end, from+int64(max))
	a, b := r.slices(from, to)
	out := make([]byte, 0, len(a)+len(b))
	return append(append(out, a...), b...), nil
}
