package proc

import (
	"io"
	"strconv"
	"sync"

	"github.com/fleetmux/fleetmux/internal/ring"
)

// capture keeps one output stream of a process: its first headSize bytes and its
// newest tailSize bytes (a ring), and counts them all. It is an io.Writer that
// never fails, so a process writing gigabytes costs a bounded amount of memory.
// Safe for concurrent use.
type capture struct {
	mu   sync.Mutex // guards the fields below
	head []byte     // the first bytes of the stream, up to cap(head)
	tail *ring.Ring // the newest bytes, addressed by their offset in the stream
	sink io.Writer  // when not nil, gets every byte kept, in order
}

func newCapture(headSize, tailSize int) *capture {
	return &capture{head: make([]byte, 0, headSize), tail: ring.New(tailSize)}
}

// Write keeps p; it never fails.
func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := cap(c.head) - len(c.head); room > 0 {
		c.head = append(c.head, p[:min(room, len(p))]...)
	}
	c.tail.Write(p)
	if c.sink != nil && len(p) > 0 {
		_, _ = c.sink.Write(p)
	}
	return len(p), nil
}

// Len is the stream's whole length so far.
func (c *capture) Len() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tail.End()
}

// Cut returns the stream cut to at most budget bytes: all of it when it fits,
// otherwise its first half-budget bytes and its last bytes with a marker line
// between them, and how many bytes were left out. The head never reaches beyond
// what was kept of it, nor the tail beyond the ring.
func (c *capture) Cut(budget int) (text []byte, omitted int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.tail.End()
	start := c.tail.Start()
	if n <= int64(budget) && int64(len(c.head)) >= start {
		// all of it: the head, then the ring from where the head ends
		out := append([]byte(nil), c.head...)
		a, b := c.tail.Slices(int64(len(c.head)), n)
		return append(append(out, a...), b...), 0
	}
	h := min(budget/2, len(c.head))
	tailFrom := max(n-int64(budget-h), start, int64(h))
	out := append([]byte(nil), c.head[:h]...)
	omitted = tailFrom - int64(h)
	out = append(out, "\n[… "+strconv.FormatInt(omitted, 10)+" bytes omitted …]\n"...)
	a, b := c.tail.Slices(tailFrom, n)
	return append(append(out, a...), b...), omitted
}

// ReadAt returns up to limit bytes of the stream from offset from: from the head
// while from is in it, otherwise from the ring; bytes the ring no longer holds
// are skipped (the returned offset says where the data starts). oldest is the
// first offset past the head that the ring still holds.
func (c *capture) ReadAt(from int64, limit int) (data []byte, off, end, oldest int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end, oldest = c.tail.End(), c.tail.Start()
	from = min(from, end)
	if from < int64(len(c.head)) {
		k := min(int64(len(c.head)), from+int64(limit))
		return append([]byte(nil), c.head[from:k]...), from, end, oldest
	}
	buf := make([]byte, min(int64(limit), end-max(from, oldest)))
	off, k := c.tail.ReadAt(from, buf)
	return buf[:k], off, end, oldest
}
