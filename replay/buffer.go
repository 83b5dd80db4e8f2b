package replay

import (
	"io"
	"sync"
)

// bufSize is the size of a Writer's buffer: events reach the file in chunks of
// about this size, or at Flush.
const bufSize = 64 << 10

// bufPool holds the buffers of Writers that have nothing buffered: a node keeps a
// recording open per session, and an idle session's recording should cost no 64 KiB
// buffer.
var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// pooledBuf is a buffered writer whose buffer comes from bufPool on the first write
// after a flush and goes back at the next flush. Writes of a whole buffer or more
// while nothing is buffered go straight through. Not safe for concurrent use.
type pooledBuf struct {
	w   io.Writer
	buf *[]byte // nil while nothing is buffered
	n   int     // bytes buffered in *buf
}

func (p *pooledBuf) Write(b []byte) (int, error) {
	done := 0
	for len(b) > 0 {
		if p.buf == nil {
			if len(b) >= bufSize {
				n, err := p.w.Write(b)
				return done + n, err
			}
			p.buf = bufPool.Get().(*[]byte)
			p.n = 0
		}
		k := copy((*p.buf)[p.n:], b)
		p.n += k
		done += k
		b = b[k:]
		if p.n == len(*p.buf) {
			if err := p.writeOut(); err != nil {
				return done, err
			}
		}
	}
	return done, nil
}

// writeOut writes what is buffered; the buffer stays for more.
func (p *pooledBuf) writeOut() error {
	if p.buf == nil || p.n == 0 {
		return nil
	}
	n, err := p.w.Write((*p.buf)[:p.n])
	if err == nil && n < p.n {
		err = io.ErrShortWrite
	}
	if err != nil {
		copy(*p.buf, (*p.buf)[n:p.n]) // keep what was not written
		p.n -= n
		return err
	}
	p.n = 0
	return nil
}

// Flush writes what is buffered and gives the buffer back to the pool.
func (p *pooledBuf) Flush() error {
	if err := p.writeOut(); err != nil {
		return err
	}
	if p.buf != nil {
		bufPool.Put(p.buf)
		p.buf = nil
	}
	return nil
}

// Buffered is how many bytes wait for the next write out.
func (p *pooledBuf) Buffered() int { return p.n }
