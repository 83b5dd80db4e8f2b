package holder

// ring holds the newest raw output of one session, addressed by absolute offset.
// It grows as output arrives, up to its size, and then wraps: an idle session with
// little output costs little. Not safe for concurrent use: the session's mutex
// guards it.
type ring struct {
	buf  []byte
	size int   // the most bytes held
	end  int64 // absolute offset one past the newest byte
}

func newRing(size int) *ring { return &ring{size: size} }

// minGrow is the least a ring allocates: a shell's first prompt fits.
const minGrow = 256

// grow makes room for need bytes: the capacity doubles, but never past size (the
// runtime's append grows large slices by a quarter, past size too, and leaves the
// copies behind for the GC).
func (r *ring) grow(need int) {
	c := min(max(need, 2*cap(r.buf), minGrow), r.size)
	buf := make([]byte, len(r.buf), c)
	copy(buf, r.buf)
	r.buf = buf
}

// start is the oldest offset still held.
func (r *ring) start() int64 { return r.end - int64(len(r.buf)) }

// write appends p, overwriting the oldest bytes once the ring is full.
func (r *ring) write(p []byte) {
	if len(r.buf) < r.size { // still growing: append what fits
		k := min(len(p), r.size-len(r.buf))
		if len(r.buf)+k > cap(r.buf) {
			r.grow(len(r.buf) + k)
		}
		r.buf = append(r.buf, p[:k]...)
		r.end += int64(k)
		p = p[k:]
		if len(p) == 0 {
			return
		}
	}
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

// read copies the bytes from offset from into dst, as many as fit, and returns
// the offset of the first and their number; from below start reads from start.
func (r *ring) read(from int64, dst []byte) (int64, int) {
	from = clamp(from, r.start(), r.end)
	to := min(r.end, from+int64(len(dst)))
	if len(r.buf) < r.size { // not wrapped yet: buf[0] is offset start
		s := from - r.start()
		return from, copy(dst, r.buf[s:s+(to-from)])
	}
	n := int64(len(r.buf))
	k := 0
	for o := from; o < to; {
		pos := o % n
		c := min(to-o, n-pos)
		k += copy(dst[k:], r.buf[pos:pos+c])
		o += c
	}
	return from, k
}

func clamp(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }
