package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Backoff of Follow's reconnects.
const (
	followMinBackoff = 100 * time.Millisecond
	followMaxBackoff = 2 * time.Second
)

// Follow streams a session's raw output from offset from into w, and returns the
// offset it reached (from plus the bytes written to w).
//
// It survives a controller restart: when the connection drops, or the controller
// answers a 5xx status, it reconnects from the offset reached (backing off from 100
// ms to 2 s) until ctx is done or the session has exited. It ends without error
// when the stream ends and the session has exited (or is gone: not found) with all
// of its output written.
//
// No byte is written twice and none is skipped: when the controller cannot resume at
// the offset reached, Follow returns an error that matches ErrGone. Only the first
// connection of a Follow from offset 0 may start later (the oldest output the
// controller still holds).
func (c *Client) Follow(ctx context.Context, node, id string, from int64, w io.Writer) (next int64, err error) {
	return c.follow(ctx, node, id, from, func(_ int64, p []byte) (int, error) {
		n, err := w.Write(p)
		if err == nil && n < len(p) {
			err = io.ErrShortWrite
		}
		return n, err
	})
}

// FollowChunks is Follow handing each piece of output to fn with the offset of its
// first byte, in order and without gaps. An error from fn ends it (the piece does
// not count as written).
func (c *Client) FollowChunks(ctx context.Context, node, id string, from int64, fn func(offset int64, data []byte) error) (next int64, err error) {
	return c.follow(ctx, node, id, from, func(off int64, p []byte) (int, error) {
		if err := fn(off, p); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

// follow is Follow with emit writing a piece that starts at offset off: it returns
// how many bytes of it were written.
func (c *Client) follow(ctx context.Context, node, id string, from int64, emit func(off int64, p []byte) (int, error)) (next int64, err error) {
	if from < 0 {
		return from, &Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("follow from offset %d: offsets are not negative", from)}
	}
	next = from
	connected := false // a stream has been opened once: the session existed
	backoff := followMinBackoff
	pause := func() error {
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(2*backoff, followMaxBackoff)
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return next, err
		}
		q := url.Values{"from": {strconv.FormatInt(next, 10)}, "follow": {"1"}}
		resp, err := c.open(ctx, http.MethodGet, node, id, "/output", q)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return next, ctx.Err()
			case connected && errors.Is(err, ErrNotFound):
				return next, nil // closed and forgotten while we were away
			case !retryable(err):
				return next, err
			}
			if err := pause(); err != nil {
				return next, err
			}
			continue
		}
		off, err := int64Header(resp, api.HeaderOffset, -1)
		if err == nil && off < 0 {
			err = &Error{Status: resp.StatusCode, Code: api.CodeInternal, Message: "the controller's output stream has no " + api.HeaderOffset + " header"}
		}
		if err != nil {
			resp.Body.Close()
			return next, err
		}
		var skip int64
		switch {
		case off > next && !connected && from == 0:
			next = off // the oldest output held: fine for a follow from the start
		case off > next:
			resp.Body.Close()
			return next, &Error{Status: resp.StatusCode, Code: api.CodeGone, Message: fmt.Sprintf(
				"output of %s/%s from offset %d is no longer held (the controller resumed at %d)", node, id, next, off)}
		case off < next:
			skip = next - off // already written: drop it
		}
		connected = true
		n, rerr, werr := copyFrom(emit, next, resp.Body, skip)
		resp.Body.Close()
		next += n
		if werr != nil {
			return next, werr
		}
		if n > 0 {
			backoff = followMinBackoff
		}
		if err := ctx.Err(); err != nil {
			return next, err
		}
		if rerr == nil {
			// The stream ended normally: the session exited, or the controller
			// is going away.
			s, err := c.Session(ctx, node, id)
			switch {
			case errors.Is(err, ErrNotFound):
				return next, nil
			case err == nil && s.State == api.StateExited && (next >= s.OutputOffset || n == 0):
				// all of it written, or the controller has nothing more to give
				return next, nil
			case err != nil && ctx.Err() != nil:
				return next, ctx.Err()
			case err != nil && !retryable(err):
				return next, err
			}
		}
		if n == 0 {
			if err := pause(); err != nil {
				return next, err
			}
		}
	}
}

// copyFrom copies r to emit after dropping the first skip bytes of r; the first byte
// emitted is at offset off. It returns the bytes written, the error reading r (nil
// at its normal end) and the error writing.
func copyFrom(emit func(off int64, p []byte) (int, error), off int64, r io.Reader, skip int64) (n int64, rerr, werr error) {
	buf := make([]byte, 32<<10)
	for {
		m, err := r.Read(buf)
		p := buf[:m]
		if skip > 0 {
			d := min(skip, int64(len(p)))
			p, skip = p[d:], skip-d
		}
		if len(p) > 0 {
			k, err := emit(off+n, p)
			n += int64(k)
			if err != nil {
				return n, nil, err
			}
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}

// retryable reports whether Follow should reconnect after err: network errors, 5xx
// statuses, unavailable and timeout.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500 || e.Code == api.CodeUnavailable || e.Code == api.CodeTimeout
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
