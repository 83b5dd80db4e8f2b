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

// ring is a fixed-size circular buffer of the newest output bytes, addressed by absolute
// offset in the session's output stream. Not safe for concurrent use: the session mutex
// guards it.
type ring struct {
	buf  []byte
	base int64 // the first offset ever written (a reattached session's may be > 0)
	end  int64 // absolute offset one past the newest byte
}

func newRing(size int) *ring { return &ring{buf: make([]byte, size)} }

// start is the oldest absolute offset still held.
func (r *ring) start() int64 { return max(r.base, r.end-int64(len(r.buf))) }

// size is the most bytes the ring holds.
func (r *ring) size() int { return len(r.buf) }

// write appends p, overwriting the oldest bytes when full.
func (r *ring) write(p []byte) {
	n := len(r.buf)
	if len(p) >= n {
		r.end += int64(len(p))
		p = p[len(p)-n:]
		pos := int(r.end % int64(n))
		copy(r.buf[pos:], p)
		copy(r.buf, p[n-pos:])
		return
	}
	pos := int(r.end % int64(n))
	k := copy(r.buf[pos:], p)
	copy(r.buf, p[k:])
	r.end += int64(len(p))
}

// slices returns the held bytes in [from, to) as at most two slices aliasing the ring.
// The range must be within [start, end].
func (r *ring) slices(from, to int64) (a, b []byte) {
	if from >= to {
		return nil, nil
	}
	n := int64(len(r.buf))
	ps, pe := from%n, to%n
	if pe == 0 {
		pe = n
	}
	if ps < pe && to-from <= n-ps {
		return r.buf[ps:pe], nil
	}
	return r.buf[ps:], r.buf[:pe]
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
