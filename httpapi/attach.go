package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/fleetmux/fleetmux/api"
)

// attach limits.
const (
	attachWriteTimeout = 10 * time.Second
)

// frame is one WebSocket message: its type and data.
type frame struct {
	typ  websocket.MessageType
	data []byte
}

// attach serves the attach WebSocket: output as binary frames (from ?from=, or a
// redraw of the current screen followed by live output), input from binary frames,
// resize from text frames ({"type":"resize","cols":C,"rows":R}); at the session's
// end a text frame {"type":"exit","exit_code":N}, on a failure {"type":"error"}.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	node, id, err := target(r)
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	var from *int64
	if r.URL.Query().Has("from") {
		f, err := queryInt(r, "from")
		if err != nil {
			s.reply(w, r, nil, err)
			return
		}
		from = &f
	}
	if _, err := s.fleet.Session(r.Context(), node, id); err != nil {
		s.reply(w, r, nil, err)
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "attach is a WebSocket: send Upgrade: websocket"))
		return
	}
	release, lerr := s.takeStream(r)
	if lerr != nil {
		s.reply(w, r, nil, lerr)
		return
	}
	defer release()
	s.reqWG.Add(1) // a hijacked connection: http.Server.Shutdown does not wait for it
	defer s.reqWG.Done()
	// Accept checks the Origin too (its host must be the request's): guard
	// checked it already, the same way.
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the request
	}
	ws.SetReadLimit(api.MaxInputBytes) // one client message
	s.attachConn(r.Context(), ws, s.stillValid(r), node, id, from)
}

// valid reports whether the attach's credential is still accepted: every input,
// resize and output frame checks it first.
func (s *Server) attachConn(rctx context.Context, ws *websocket.Conn, valid func() bool, node, id string, from *int64) {
	defer ws.CloseNow()
	ctx, cancel := context.WithCancel(rctx)
	defer cancel()
	// Shutdown ends the stream: a cancelled ctx closes the connection (a Read or
	// Write in progress with it returns at once).
	defer context.AfterFunc(s.streamCtx, cancel)()
	send := func(f frame) error {
		wctx, wcancel := context.WithTimeout(ctx, attachWriteTimeout)
		defer wcancel()
		return ws.Write(wctx, f.typ, f.data)
	}
	sendMsg := func(m api.AttachMsg) {
		b, _ := json.Marshal(m)
		send(frame{typ: websocket.MessageText, data: b})
	}

	// Input: the client's frames, in order, on a goroutine owned by this attach.
	inputDone := make(chan struct{})
	go func() {
		defer close(inputDone)
		defer cancel() // the client went away: stop streaming
		for {
			var f frame
			var err error
			if f.typ, f.data, err = ws.Read(ctx); err != nil {
				return
			}
			if !valid() {
				sendMsg(api.AttachMsg{Type: api.AttachError, Error: errRevoked})
				return
			}
			// A viewer watches: typing and resizing need an operator (the node
			// checks too; this refuses before a frame goes anywhere).
			if who := callerOf(rctx); !api.RoleAtLeast(who.role, api.RoleOperator) {
				sendMsg(api.AttachMsg{Type: api.AttachError, Error: api.Errorf(api.CodeForbidden, "%s is a %s: viewers cannot type or resize", who.principal, who.role)})
				return
			}
			switch f.typ {
			case websocket.MessageBinary:
				err = s.fleet.AttachInput(ctx, node, id, string(f.data))
			case websocket.MessageText:
				var m api.AttachMsg
				if json.Unmarshal(f.data, &m) != nil || m.Type != api.AttachResize {
					err = api.Errorf(api.CodeBadRequest, "text frames are JSON messages: {\"type\":\"resize\",\"cols\":C,\"rows\":R}")
					break
				}
				_, err = s.fleet.Resize(ctx, node, id, m.Cols, m.Rows)
			}
			if ae, ok := err.(*api.Error); ok {
				sendMsg(api.AttachMsg{Type: api.AttachError, Error: ae})
				if ae.Code != api.CodeBadRequest && ae.Code != api.CodeTooLarge && ae.Code != api.CodeBusy {
					return
				}
			} else if err != nil {
				return
			}
		}
	}()

	var out io.Writer = binaryWriter{send: send, valid: valid}
	var start int64
	var err error
	if from != nil {
		start = *from
	} else {
		start, err = s.fleet.Redraw(ctx, node, id, binaryWriter{send: send, valid: func() bool { return true }})
	}
	var view *viewQueue
	viewDone := make(chan error, 1)
	if err == nil && from == nil {
		// A terminal's view (view.go): a bounded queue, written out by its own
		// goroutine (waited for below), redrawn when it falls behind.
		view = newViewQueue(start, viewMaxBehind, valid)
		out = view
		go func() {
			err := s.writeView(ctx, view, send, node, id)
			if err != nil {
				cancel()
			}
			viewDone <- err
		}()
	}
	if err == nil {
		var exitCode *int
		var exited bool
		for {
			exitCode, exited, err = s.fleet.Follow(ctx, node, id, start, out)
			// A flood outran the follow and the node no longer has what it
			// missed: a view needs the screen, not those bytes. It goes on from
			// where the output is now, redrawn (an attach from an offset, which
			// wants every byte, ends with the error).
			if view == nil || ctx.Err() != nil || !errors.Is(err, &api.Error{Code: api.CodeGone}) {
				break
			}
			var sess api.Session
			if sess, err = s.fleet.Session(ctx, node, id); err != nil {
				break
			}
			start = sess.OutputOffset
			view.skip(start)
		}
		if view != nil {
			view.finish()
			if werr := <-viewDone; err == nil {
				err = werr
			}
		}
		if err == nil && exited {
			sendMsg(api.AttachMsg{Type: api.AttachExit, ExitCode: exitCode})
		}
	}
	if ae, ok := err.(*api.Error); ok && ctx.Err() == nil {
		sendMsg(api.AttachMsg{Type: api.AttachError, Error: ae})
	}
	if ctx.Err() != nil {
		// The peer went away, or the server shuts down: no close handshake to wait
		// for (a peer that does not read would hold Shutdown 5 s).
		ws.CloseNow()
	} else {
		// The close frame, and the peer's answer, which the input goroutine's Read
		// takes (at most 5 s).
		ws.Close(websocket.StatusNormalClosure, "")
	}
	<-inputDone
}

// binaryWriter sends each write as one binary frame, once valid says the
// stream's token is still accepted.
type binaryWriter struct {
	send  func(frame) error
	valid func() bool
}

func (bw binaryWriter) Write(p []byte) (int, error) {
	if !bw.valid() {
		return 0, errRevoked
	}
	if err := bw.send(frame{typ: websocket.MessageBinary, data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}
