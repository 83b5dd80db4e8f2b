package holder

// The attach stream of a session: its output from an offset, then its exit, sent
// by a goroutine that runs only while there is something to send.

import (
	"fmt"
	"sync"
)

// outStream is the attached agent's stream of one session. At most one sender
// goroutine runs for it, and only while the stream is behind the ring or the exit
// is due: whoever changes that (the read loop's append, the exit) starts it under
// the session's mutex, and the sender stops under the same mutex when it finds
// nothing to send, so no output is left unsent.
//
// Nothing reads a stream: an agent that went away is noticed at the next send
// (EPIPE), or when a newer attach replaces its stream, or when the session is
// forgotten. Until then the session keeps one idle connection (its fd), never more.
type outStream struct {
	c       *conn
	off     int64  // the next offset to send; guarded by held.mu
	sending bool   // a sender runs; guarded by held.mu
	pid     int    // the attached process (SO_PEERCRED)
	epoch   uint64 // the attach's epoch
}

// outBufs are the messages output is sent in ('O', offset, up to chunk bytes),
// shared by every sender of the process: a sender holds one only while it sends.
var outBufs = sync.Pool{New: func() any { b := make([]byte, 9+chunk); return &b }}

// attach makes c the session's stream from offset from (clamped to what the ring
// holds), for the process pid, when epoch is the session's: one attach at a time,
// by epoch. Epoch 0 attaches a session whose stream is free (never attached, its
// agent gone, or ended); the epoch of the newest attach (the attacher's own, or
// one a list showed) ends that stream and takes its place. Any other attach is
// refused (ErrStale): an attach cannot end a live stream unless it names it, and
// of two attaches that name the same one, the first wins. Attaches are ordered as
// they are made, before their replies (an agent that closes a stream as soon as
// its reply came and attaches again must not find the older stream winning).
//
// The stream sends nothing until begin: the reply goes first. It returns the
// stream and what the reply needs; err is ErrNoSession when the session is
// forgotten, ErrStale when refused (c is not taken then). Otherwise c is the
// session's: it is closed when the stream ends.
func (h *held) attach(c *conn, from int64, epoch uint64, pid int) (o *outStream, info Info, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return nil, Info{}, fmt.Errorf("%w: %s closed", ErrNoSession, h.id)
	}
	live := h.out != nil && !h.out.c.peerGone()
	if epoch != h.epoch && (epoch != 0 || live) {
		holder := 0
		if live {
			holder = h.out.pid
		}
		return nil, Info{}, fmt.Errorf("%w: %s is at epoch %d (asked: %d), its stream held by pid %d", ErrStale, h.id, h.epoch, epoch, holder)
	}
	if h.out != nil {
		h.out.c.close() // the older stream ends; its sender, if any, stops at its next look
	}
	h.epoch++
	// sending holds the sender back until begin.
	o = &outStream{c: c, off: max(h.ring.Start(), min(from, h.ring.End())), sending: true, pid: pid, epoch: h.epoch}
	h.out = o
	h.broadcastLocked() // a read loop waiting for the older stream's room looks again
	return o, h.infoLocked(), nil
}

// begin lets o send once the attach's reply was sent; sent false (it could not
// be) ends the stream.
func (h *held) begin(o *outStream, sent bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.out != o {
		return // replaced or forgotten meanwhile: whoever did it closed o.c
	}
	if !sent {
		h.out = nil
		h.broadcastLocked()
		o.c.close()
		return
	}
	o.sending = false
	h.kickLocked()
}

// kickLocked starts the stream's sender when there is something to send and none
// runs. h.mu held.
func (h *held) kickLocked() {
	o := h.out
	if o == nil || o.sending || (o.off >= h.ring.End() && !h.exited) {
		return
	}
	o.sending = true
	h.wg.Add(1) // never after forget: it clears h.out first, under h.mu
	go h.send(o)
}

// send sends o's output until it caught up with the ring, then returns; once the
// exit is due and all output sent, it sends the exit and ends the stream. A failed
// send (the agent went away), a newer attach or forget end it too.
func (h *held) send(o *outStream) {
	defer h.wg.Done()
	bp := outBufs.Get().(*[]byte)
	defer outBufs.Put(bp)
	msg := *bp
	for {
		h.mu.Lock()
		if h.out != o { // replaced or forgotten: whoever did it closed o.c
			o.sending = false
			h.mu.Unlock()
			return
		}
		start, n := h.ring.ReadAt(o.off, msg[9:])
		if n == 0 {
			if !h.exited {
				o.sending = false // caught up: the next output starts another sender
				h.mu.Unlock()
				return
			}
			x := exitInfo{Code: h.code, End: h.ring.End()}
			h.mu.Unlock()
			// Still the stream while the exit is sent: forget (or a newer attach)
			// closes it, should the agent not read.
			_ = o.c.sendJSON(kindExit, x)
			h.mu.Lock()
			if h.out == o {
				h.out = nil // the exit ends the stream
				h.broadcastLocked()
			}
			h.mu.Unlock()
			o.c.close()
			return
		}
		o.off = start + int64(n)
		h.broadcastLocked() // the read loop may wait for this room (waitRoom)
		h.mu.Unlock()
		if err := o.c.sendOutput(start, msg[:9+n]); err != nil {
			h.mu.Lock()
			if h.out == o {
				h.out = nil
				h.broadcastLocked()
			}
			h.mu.Unlock()
			o.c.close()
			return
		}
	}
}
