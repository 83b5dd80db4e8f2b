package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/fleetmux/fleetmux/api"
)

// followBuffer is how many output messages a stream holds for a slow client; past
// it the stream drops live messages and reads the range from the node instead (the
// node's publishing never waits for a stream). A variable for tests.
var followBuffer = 256

type outMsg struct {
	off  int64
	data []byte
}

// streamEnd says why a follow ended.
type streamEnd struct {
	next     int64 // the offset reached
	exited   bool  // the session exited or was closed
	exitCode *int
}

// follow streams a session's output from offset from to emit, gap-free and in order
// (emit gets each byte exactly once, with its offset), until ctx is done, the session
// exits (after its last byte), the node goes down, or emit fails. emit runs on the
// caller's goroutine; while it blocks, live messages pile up to followBuffer and are
// then read from the node instead.
func (c *Controller) follow(ctx context.Context, who principal, node, id string, from int64, emit func(off int64, p []byte) error) (streamEnd, error) {
	end := streamEnd{next: from}
	msgs := make(chan outMsg, followBuffer)
	kick := make(chan struct{}, 1) // live messages were dropped
	exited := make(chan *int, 1)   // the session exited or was closed
	var overflow atomic.Bool
	stopOut, err := c.cfg.Bus.Subscribe(c.subj.Out(node, id), func(_ string, h map[string]string, data []byte) {
		off, err := strconv.ParseInt(h[api.HeaderOffset], 10, 64)
		if err != nil {
			return
		}
		select {
		case msgs <- outMsg{off: off, data: data}:
		default:
			overflow.Store(true)
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return end, api.Errorf(api.CodeUnavailable, "cannot subscribe to the output of %s/%s", node, id)
	}
	defer stopOut()
	stopEv, err := c.cfg.Bus.Subscribe(c.subj.Event(node, id), func(_ string, _ map[string]string, data []byte) {
		var ev api.SessionEvent
		if json.Unmarshal(data, &ev) != nil || ev.Type != api.EventExited && ev.Type != api.EventClosed {
			return
		}
		select {
		case exited <- ev.ExitCode:
		default:
		}
	})
	if err != nil {
		return end, api.Errorf(api.CodeUnavailable, "cannot subscribe to the events of %s/%s", node, id)
	}
	defer stopEv()

	// catchUp reads from the node until the output end it reports.
	catchUp := func() error {
		for {
			var rr api.ReadReply
			if err := c.call(ctx, who, node, "read", api.ReadRequest{Session: id, From: end.next}, &rr, c.cfg.RequestTimeout); err != nil {
				return err
			}
			if len(rr.Data) > 0 {
				if err := emit(end.next, rr.Data); err != nil {
					return err
				}
				end.next += int64(len(rr.Data))
			}
			if end.next >= rr.End || len(rr.Data) == 0 {
				return nil
			}
		}
	}
	if err := catchUp(); err != nil {
		return end, err
	}
	var s api.Session
	if err := c.call(ctx, who, node, "get", api.SessionRequest{Session: id}, &s, c.cfg.RequestTimeout); err != nil {
		return end, err
	}
	if s.State == api.StateExited {
		end.exited, end.exitCode = true, s.ExitCode
		return end, catchUp()
	}
	_, downCtx, known := c.nodes.lookup(node)
	if !known {
		return end, api.Errorf(api.CodeNotFound, "unknown node %q", node)
	}
	down := downCtx.Done()
	for {
		select {
		case <-ctx.Done():
			return end, ctx.Err()
		case <-down:
			return end, api.Errorf(api.CodeUnavailable, "node %s went down", node)
		case code := <-exited:
			end.exited, end.exitCode = true, code
			err := catchUp()
			if errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
				err = nil // closed: it had no more output to give
			}
			return end, err
		case <-kick:
			overflow.Store(false)
			if err := catchUp(); err != nil {
				return end, err
			}
		case m := <-msgs:
			if m.off > end.next { // a gap: messages were lost (slow consumer, reconnect)
				if err := catchUp(); err != nil {
					return end, err
				}
			}
			if m.off+int64(len(m.data)) <= end.next {
				continue // already sent
			}
			if m.off > end.next {
				continue // the node no longer has the gap: catchUp stopped short (it reported the error)
			}
			p := m.data[end.next-m.off:]
			if err := emit(end.next, p); err != nil {
				return end, err
			}
			end.next += int64(len(p))
		}
	}
}

// output serves GET .../output: the raw bytes from ?from= to the end of the output
// as it stands when the request arrives (at most ?max_bytes= when given), or with
// ?follow=1 a stream that ends when the session exits.
func (c *Controller) output(w http.ResponseWriter, r *http.Request) {
	node, id, err := target(r)
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	from, err := queryInt(r, "from")
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	if r.URL.Query().Has("max") { // its name before max_bytes: never ignore a limit
		c.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "query max: the parameter is max_bytes"))
		return
	}
	maxBytes, err := queryInt(r, "max_bytes")
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	follow := false
	switch f := r.URL.Query().Get("follow"); f {
	case "", "0", "false":
	case "1", "true":
		follow = true
	default:
		c.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "follow=%q: want 1 or 0", f))
		return
	}
	who := httpPrincipal(r)
	// The first read answers errors (unknown session, gone range) as JSON before any
	// byte of the stream is written.
	var first api.ReadReply
	if err := c.call(r.Context(), who, node, "read", api.ReadRequest{Session: id, From: from, Max: readPage(maxBytes)}, &first, c.cfg.RequestTimeout); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(api.HeaderOffset, strconv.FormatInt(first.Offset, 10))
	h.Set(api.HeaderEnd, strconv.FormatInt(first.End, 10))
	h.Set(api.HeaderOldest, strconv.FormatInt(first.Oldest, 10))
	if !follow {
		c.outputRange(w, r, who, node, id, first, maxBytes)
		return
	}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	valid := c.stillValid(r)
	emit := func(_ int64, p []byte) error {
		if !valid() {
			return errRevoked // the token was revoked or expired while the stream was open
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		c.metrics.streamBytes.Add(float64(len(p)))
		return nil
	}
	if err := emit(first.Offset, first.Data); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(c.streamCtx, cancel)()
	c.reqWG.Add(1)
	defer c.reqWG.Done()
	_, err = c.follow(ctx, who, node, id, first.Offset+int64(len(first.Data)), emit)
	if err != nil && ctx.Err() == nil {
		// The body is a byte stream: an error can only end it. The client sees the
		// end, asks again from the offset it reached, and gets the error as JSON.
		// Aborting (no final chunk) tells a cut stream from a session's end.
		c.log.Debug("output stream ended", "node", node, "session", id, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// readPage is the Max of a read request for a range of at most maxBytes (0: no
// limit): the node's read size is a page of the reply, not its limit.
func readPage(maxBytes int64) int {
	if maxBytes <= 0 || maxBytes > api.MaxReadBytes {
		return api.MaxReadBytes
	}
	return int(maxBytes)
}

// outputRange writes the bytes [first.Offset, end) of a session's output, where end
// is the output's end in the first reply (when the request arrived), or fewer when
// maxBytes (> 0) is less. It pages through the node's read verb, one page in memory
// at a time. The length is known up front (Content-Length), so a range cut short (the
// node went down, the range left the scrollback and the recording) is a short body,
// never a silently shorter file.
func (c *Controller) outputRange(w http.ResponseWriter, r *http.Request, who principal, node, id string, first api.ReadReply, maxBytes int64) {
	from, end := first.Offset, first.End
	if maxBytes > 0 {
		end = min(end, from+maxBytes)
	}
	end = max(end, from)
	w.Header().Set("Content-Length", strconv.FormatInt(end-from, 10))
	w.WriteHeader(http.StatusOK)
	next := from
	page := first
	for {
		if page.Offset != next || len(page.Data) == 0 && next < end {
			c.log.Warn("output read out of step; range cut short", "node", node, "session", id, "want", next, "got", page.Offset, "bytes", len(page.Data))
			panic(http.ErrAbortHandler)
		}
		data := page.Data[:min(int64(len(page.Data)), end-next)]
		if _, err := w.Write(data); err != nil {
			return // the client went away
		}
		next += int64(len(data))
		if next >= end {
			return
		}
		page = api.ReadReply{}
		req := api.ReadRequest{Session: id, From: next, Max: readPage(end - next)}
		if err := c.call(r.Context(), who, node, "read", req, &page, c.cfg.RequestTimeout); err != nil {
			// The status is sent: the short body is the client's sign.
			c.log.Debug("output range cut short", "node", node, "session", id, "offset", next, "err", err)
			panic(http.ErrAbortHandler)
		}
	}
}
