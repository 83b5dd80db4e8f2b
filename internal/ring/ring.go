// Package ring holds Ring, the newest bytes of an output stream addressed by their
// absolute offset in it. The holder keeps a session's raw output in one; the agent's
// session keeps its scrollback in another.
package ring

// Ring is a circular buffer of the newest bytes of a stream, addressed by absolute
// offset. It grows as bytes arrive, up to its size, and then wraps: an idle session
// with a prompt or two holds a few hundred bytes, not its whole scrollback. Not safe
// for concurrent use: its owner's mutex guards it.
type Ring struct {
	buf  []byte // len(buf) bytes held; cap grows by doubling up to max
	max  int    // the most bytes held
	base int64  // offset of buf[0] before the first wrap (set at the first write)
	end  int64  // absolute offset one past the newest byte
}

// minGrow is the smallest allocation of a growing ring: a shell's first prompt fits.
const minGrow = 256

// New returns an empty ring of size bytes whose stream starts at offset 0.
func New(size int) *Ring { return &Ring{max: size} }

// NewAt returns an empty ring of size bytes whose next byte has offset off (a
// session reattached to a holder's output goes on from where it was).
func NewAt(size int, off int64) *Ring { return &Ring{max: size, base: off, end: off} }

// Size is the most bytes the ring holds.
func (r *Ring) Size() int { return r.max }

// Start is the oldest absolute offset still held.
func (r *Ring) Start() int64 { return r.end - int64(len(r.buf)) }

// End is the absolute offset one past the newest byte.
func (r *Ring) End() int64 { return r.end }

// Cap is how many bytes the ring has allocated (at most Size).
func (r *Ring) Cap() int { return cap(r.buf) }

// pos is the index in buf of offset o (Start <= o < End).
func (r *Ring) pos(o int64) int { return int((o - r.base) % int64(len(r.buf))) }

// Write appends p, overwriting the oldest bytes once the ring is full.
func (r *Ring) Write(p []byte) {
	if len(p) == 0 {
		return
	}
	if len(r.buf) == 0 {
		r.base = r.end
	}
	if len(r.buf) < r.max { // still growing: append what fits
		k := min(len(p), r.max-len(r.buf))
		if need := len(r.buf) + k; need > cap(r.buf) {
			// The capacity doubles, but never past max (append grows large slices
			// by a quarter, past max too, and leaves the copies to the GC).
			nb := make([]byte, len(r.buf), min(r.max, max(need, 2*cap(r.buf), minGrow)))
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
	if n == 0 { // a ring of size 0 holds nothing: it only counts
		r.base = r.end
		return
	}
	if len(p) > n {
		p = p[len(p)-n:]
	}
	i := r.pos(r.end - int64(len(p)))
	k := copy(r.buf[i:], p)
	copy(r.buf, p[k:])
}

// Slices returns the held bytes in [from, to) as at most two slices aliasing the
// ring, valid until the next Write. The range must be within [Start, End].
func (r *Ring) Slices(from, to int64) (a, b []byte) {
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

// ReadAt copies the bytes from offset from into dst, as many as fit, and returns the
// offset of the first and their number; from is clamped to [Start, End].
func (r *Ring) ReadAt(from int64, dst []byte) (int64, int) {
	from = max(r.Start(), min(from, r.end))
	to := min(r.end, from+int64(len(dst)))
	a, b := r.Slices(from, to)
	k := copy(dst, a)
	return from, k + copy(dst[k:], b)
}
