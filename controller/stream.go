package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/fleetmux/fleetmux/api"
)

// DefaultFollowBuffer is Config.FollowBuffer's default.
const DefaultFollowBuffer = 256

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
// caller's goroutine; while it blocks, live messages pile up to Config.FollowBuffer and are
// then read from the node instead.
func (c *Controller) follow(ctx context.Context, who principal, node, id string, from int64, emit func(off int64, p []byte) error) (streamEnd, error) {
	end := streamEnd{next: from}
	msgs := make(chan outMsg, c.cfg.FollowBuffer)
	kick := make(chan struct{}, 1) // live messages were dropped
	exited := make(chan *int, 1)   // the session exited or was closed
	var overflow atomic.Bool
	stopOut, err := c.share.Subscribe(c.subj.Out(node, id), func(_ string, h map[string]string, data []byte) {
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
	stopEv, err := c.share.Subscribe(c.subj.Event(node, id), func(_ string, _ map[string]string, data []byte) {
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
		return end, c.unknownNode(node)
	}
	down := downCtx.Done()
	for {
		select {
		case <-ctx.Done():
			return end, ctx.Err()
		case <-down:
			return end, api.Errorf(api.CodeUnavailable, "node %s went down", node)
		case <-exited:
			// An event is a claim, not a fact: whoever gets a message onto the
			// event subject (a JetStream request's reply subject is the asker's
			// choice) could end every follower. The node says whether it exited.
			var s api.Session
			err := c.call(ctx, who, node, api.VerbGet, api.SessionRequest{Session: id}, &s, c.cfg.RequestTimeout)
			switch {
			case errors.Is(err, &api.Error{Code: api.CodeNotFound}): // closed
			case err != nil:
				return end, err
			case s.State != api.StateExited:
				continue // not so: follow on
			}
			end.exited, end.exitCode = true, s.ExitCode
			err = catchUp()
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

// redraw sends what an attaching terminal sees first, the session's current
// screen redrawn, and returns the output offset live output continues from.
func (c *Controller) redraw(ctx context.Context, who principal, node, id string, send func([]byte) error) (int64, error) {
	var s api.Session
	if err := c.call(ctx, who, node, "get", api.SessionRequest{Session: id}, &s, c.cfg.RequestTimeout); err != nil {
		return 0, err
	}
	var sc api.Screen
	if err := c.call(ctx, who, node, "screen", api.SessionRequest{Session: id}, &sc, c.cfg.RequestTimeout); err != nil {
		return 0, err
	}
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	for i, line := range strings.Split(strings.TrimRight(sc.Text, "\n"), "\n") {
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString(line)
	}
	fmt.Fprintf(&b, "\x1b[%d;%dH", sc.Cursor.Row+1, sc.Cursor.Col+1)
	return s.OutputOffset, send([]byte(b.String()))
}
