package httpapi

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// A terminal's view of a session (an attach that began with a redraw of the screen,
// as the console's terminal and `fleetmux attach` do) does not need every byte of a
// flood to show the right screen, and must never cost the session more than a screen
// is worth: its output waits in a bounded queue (viewQueue) that one goroutine per
// attach writes out, after a frame larger than viewSmallFrame at most one frame every
// viewFrameEvery (what came meanwhile goes in one frame). When more than viewMaxBehind is waiting, the queue
// drops it and the writer redraws the current screen instead (at most once every
// viewResyncEvery), then goes on from there. Twenty people watching a session that
// prints 40 MB/s cost a few screens a second each, not 40 MB/s each; the session
// never waits for any of them. An attach from an offset (?from=) gets every byte.
const (
	viewMaxBehind   = 256 << 10
	viewFrameEvery  = 16 * time.Millisecond
	viewResyncEvery = 250 * time.Millisecond
	// viewSmallFrame: a frame no larger is not followed by a pause (an echo, a
	// prompt).
	viewSmallFrame = 4 << 10
)

// viewQueue is one terminal view's output waiting to be written: the bytes from
// offset off on, at most max of them; behind says bytes were dropped (a redraw is
// due). Follow writes into it (never blocking); the view's writer takes from it.
type viewQueue struct {
	mu     sync.Mutex
	buf    []byte
	off    int64 // the offset of buf[0]; while behind, of the next byte to come
	from   int64 // output before it is not wanted (the last redraw shows it)
	max    int
	behind bool
	done   bool // no more output comes (finish)
	wake   chan struct{}
	valid  func() bool
}

func newViewQueue(from int64, max int, valid func() bool) *viewQueue {
	return &viewQueue{off: from, max: max, wake: make(chan struct{}, 1), valid: valid}
}

// Write queues p (the output after what was written before, as Follow gives it).
// Past max, it drops what is queued and marks the view behind: until the redraw,
// output is only counted.
func (q *viewQueue) Write(p []byte) (int, error) {
	if !q.valid() {
		return 0, errRevoked
	}
	n := len(p)
	q.mu.Lock()
	switch {
	case q.behind: // a redraw is due: what comes until then is only counted
		q.off += int64(len(p))
	case len(q.buf)+len(p) > q.max:
		q.off += int64(len(q.buf) + len(p))
		q.buf, q.behind = q.buf[:0], true
	default:
		if len(q.buf) == 0 && q.off < q.from { // output the last redraw already shows
			cut := min(q.from-q.off, int64(len(p)))
			p, q.off = p[cut:], q.off+cut
		}
		q.buf = append(q.buf, p...)
	}
	q.mu.Unlock()
	q.signal()
	return n, nil
}

func (q *viewQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// finish says no more output comes: the writer returns once it wrote what is queued.
func (q *viewQueue) finish() {
	q.mu.Lock()
	q.done = true
	q.mu.Unlock()
	q.signal()
}

func (q *viewQueue) finished() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.done
}

// skip says the output before offset to will never come (the node no longer
// has it): what is queued goes, and the view is redrawn.
func (q *viewQueue) skip(to int64) {
	q.mu.Lock()
	q.buf, q.off, q.behind = q.buf[:0], to, true
	q.mu.Unlock()
	q.signal()
}

// take returns what is queued (nil when nothing is), whether a redraw is due instead,
// and whether the queue is finished and empty.
func (q *viewQueue) take(into []byte) (data []byte, behind, over bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.behind {
		return nil, true, false
	}
	data = append(into[:0], q.buf...)
	q.off += int64(len(q.buf))
	q.buf = q.buf[:0]
	return data, false, q.done && len(data) == 0
}

// redrawn says the view now shows the screen as of output offset at: output before
// it goes (queued or still to come); the view is caught up unless output after it
// was dropped already (then it redraws again).
func (q *viewQueue) redrawn(at int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if at < q.off { // the queue lost bytes after the screen: redraw again later
		return
	}
	skip := min(at-q.off, int64(len(q.buf)))
	q.buf = append(q.buf[:0], q.buf[skip:]...)
	q.off += skip
	q.from, q.behind = at, false
}

// writeView writes q's output to the attach until q is finished and drained (nil),
// ctx ends, or a write or redraw fails. One frame per viewFrameEvery at most; a view
// that fell behind gets the current screen instead, at most once per viewResyncEvery.
func (s *Server) writeView(ctx context.Context, q *viewQueue, send func(frame) error, node, id string) error {
	var buf []byte
	var lastRedraw time.Time
	pace := time.NewTimer(time.Hour)
	pace.Stop()
	defer pace.Stop()
	wait := func(until time.Time) error {
		if d := time.Until(until); d > 0 {
			pace.Reset(d)
			select {
			case <-pace.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	for {
		data, behind, over := q.take(buf)
		switch {
		case over:
			return nil
		case behind:
			if err := wait(lastRedraw.Add(viewResyncEvery)); err != nil {
				return err
			}
			lastRedraw = time.Now()
			screen, at, err := s.redraws.get(ctx, s.fleet, node, id)
			if err != nil {
				if q.finished() {
					return nil // the session is gone: its end is what the view shows next
				}
				return err
			}
			if err := send(frame{typ: websocket.MessageBinary, data: screen}); err != nil {
				return err
			}
			q.redrawn(at)
			continue
		case len(data) == 0:
			select {
			case <-q.wake:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		buf = data // reused: a Write is done with its data when it returns
		sent := time.Now()
		if err := send(frame{typ: websocket.MessageBinary, data: data}); err != nil {
			return err
		}
		if len(data) <= viewSmallFrame {
			continue // typing and its echo go at once
		}
		if err := wait(sent.Add(viewFrameEvery)); err != nil {
			return err
		}
	}
}

// redraws shares the redraws of a session among its views that fell behind at once
// (a flood puts them all behind together): a redraw that a view asks for while one
// for the same session and the same caller (principal and role: the node decides
// what each may see) is under way, or was made less than redrawShared ago, is that
// one. Twenty views of a flood cost the node a screen per viewResyncEvery, not twenty.
type redraws struct {
	mu sync.Mutex
	m  map[redrawKey]*redrawCall
}

const redrawShared = 50 * time.Millisecond

type redrawKey struct{ principal, role, node, id string }

type redrawCall struct {
	done   chan struct{}
	screen []byte
	at     int64
	err    error
	made   time.Time // when it was done (zero while under way)
}

func newRedraws() *redraws { return &redraws{m: map[redrawKey]*redrawCall{}} }

// get returns a redraw of the session's screen and the output offset it shows
// (Fleet.Redraw), made now or shared.
func (r *redraws) get(ctx context.Context, fleet Fleet, node, id string) ([]byte, int64, error) {
	who := callerOf(ctx)
	key := redrawKey{who.principal, who.role, node, id}
	r.mu.Lock()
	c, ok := r.m[key]
	if ok && !c.made.IsZero() && time.Since(c.made) > redrawShared {
		ok = false
	}
	if !ok {
		for k, old := range r.m { // the map holds only calls under way or fresh
			if !old.made.IsZero() && time.Since(old.made) > redrawShared {
				delete(r.m, k)
			}
		}
		c = &redrawCall{done: make(chan struct{})}
		r.m[key] = c
	}
	r.mu.Unlock()
	if !ok {
		var b bytes.Buffer
		c.at, c.err = fleet.Redraw(ctx, node, id, &b)
		c.screen = b.Bytes()
		r.mu.Lock()
		c.made = time.Now()
		if c.err != nil && r.m[key] == c { // an error is not shared with later views
			delete(r.m, key)
		}
		r.mu.Unlock()
		close(c.done)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	if c.err != nil && ok { // another view's failure (it went away?): not ours
		var b bytes.Buffer
		at, err := fleet.Redraw(ctx, node, id, &b)
		return b.Bytes(), at, err
	}
	return c.screen, c.at, c.err
}
