package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"

	"github.com/fleetmux/fleetmux/api"
)

const (
	// wsMaxMessage bounds one message read into memory.
	wsMaxMessage = 16 << 20
	// wsMaxFrame bounds one message written (bigger writes are split).
	wsMaxFrame = 64 << 10
)

// AttachOptions configure Attach.
type AttachOptions struct {
	// From, when set, starts the output at this offset; nil: the controller first
	// sends the recent output that fills the screen.
	From *int64
}

// AttachConn is a live connection to a session's terminal: Read gives its output,
// Write types into it. One goroutine may read while another writes (or resizes).
type AttachConn struct {
	ws   *websocket.Conn
	ctx  context.Context
	stop func() bool // stops closing on ctx's end

	// reader side (one reader at a time)
	rmu     sync.Mutex
	pending []byte
	rerr    error

	mu       sync.Mutex
	exitCode *int
}

// Attach opens a WebSocket to a session's terminal. ctx bounds the dial and the
// connection's life: when it is done the connection closes.
func (c *Client) Attach(ctx context.Context, node, id string, opts AttachOptions) (*AttachConn, error) {
	p, err := sessionPath(node, id, "/attach")
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if opts.From != nil {
		if *opts.From < 0 {
			return nil, &Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("attach from offset %d: offsets are not negative", *opts.From)}
		}
		q.Set("from", strconv.FormatInt(*opts.From, 10))
	}
	req, err := c.request(ctx, http.MethodGet, p, q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Origin", c.base.Scheme+"://"+c.base.Host)
	// A client Timeout would cut the connection; ctx bounds the dial.
	hc := *c.hc
	hc.Timeout = 0
	ws, resp, err := websocket.Dial(ctx, req.URL.String(), &websocket.DialOptions{
		HTTPClient: &hc,
		HTTPHeader: req.Header,
	})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			// the API's JSON error (the library keeps the body's first KiB)
			return nil, readError(resp)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("client: attach %s/%s: %w", node, id, err)
	}
	ws.SetReadLimit(wsMaxMessage)
	a := &AttachConn{ws: ws, ctx: ctx}
	a.stop = context.AfterFunc(ctx, func() { _ = ws.CloseNow() })
	return a, nil
}

// Read reads the session's output. It returns io.EOF once the session has exited
// (ExitCode is then set), and the controller's error (an *Error) when it sends one.
func (a *AttachConn) Read(p []byte) (int, error) {
	a.rmu.Lock()
	defer a.rmu.Unlock()
	for len(a.pending) == 0 {
		if a.rerr != nil {
			return 0, a.rerr
		}
		op, data, err := a.ws.Read(a.ctx)
		if err != nil {
			switch {
			case a.ctx.Err() != nil:
				err = a.ctx.Err()
			case websocket.CloseStatus(err) != -1:
				err = io.EOF // the controller closed the connection
			case errors.Is(err, net.ErrClosed):
				err = net.ErrClosed
			}
			a.rerr = err
			continue
		}
		switch op {
		case websocket.MessageBinary:
			a.pending = data
		case websocket.MessageText:
			var m api.AttachMsg
			if err := json.Unmarshal(data, &m); err != nil {
				a.rerr = &Error{Code: api.CodeInternal, Message: fmt.Sprintf("bad attach message from the controller (%v): %s", err, snippet(data))}
				continue
			}
			switch m.Type {
			case api.AttachExit:
				code := -1
				if m.ExitCode != nil {
					code = *m.ExitCode
				}
				a.mu.Lock()
				a.exitCode = &code
				a.mu.Unlock()
				a.rerr = io.EOF
			case api.AttachError:
				e := &Error{Code: api.CodeInternal, Message: "the controller ended the attachment"}
				if m.Error != nil {
					e.Code, e.Message = m.Error.Code, m.Error.Message
				}
				a.rerr = e
			}
			// other types are for newer clients: ignored
		}
	}
	n := copy(p, a.pending)
	a.pending = a.pending[n:]
	return n, nil
}

// Write types p into the session.
func (a *AttachConn) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		end := min(len(p), written+wsMaxFrame)
		if err := a.ws.Write(a.ctx, websocket.MessageBinary, p[written:end]); err != nil {
			return written, a.writeErr(err)
		}
		written = end
	}
	return written, nil
}

// Resize sets the session's terminal size.
func (a *AttachConn) Resize(cols, rows int) error {
	if cols <= 0 || rows <= 0 {
		return &Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("resize to %dx%d: want positive columns and rows", cols, rows)}
	}
	b, err := json.Marshal(api.AttachMsg{Type: api.AttachResize, Cols: cols, Rows: rows})
	if err != nil {
		return err
	}
	return a.writeErr(a.ws.Write(a.ctx, websocket.MessageText, b))
}

func (a *AttachConn) writeErr(err error) error {
	if err != nil && a.ctx.Err() != nil {
		return a.ctx.Err()
	}
	return err
}

// ExitCode is the session's exit code once Read has returned io.EOF because the
// session exited (-1 when the controller did not know it); nil before.
func (a *AttachConn) ExitCode() *int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.exitCode == nil {
		return nil
	}
	c := *a.exitCode
	return &c
}

// Close closes the connection; a blocked Read returns.
func (a *AttachConn) Close() error {
	a.stop()
	err := a.ws.Close(websocket.StatusNormalClosure, "")
	if errors.Is(err, net.ErrClosed) {
		return nil // closed already
	}
	return err
}
