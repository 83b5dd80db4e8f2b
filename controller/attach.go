package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"golang.org/x/net/websocket"
)

// attach limits.
const (
	attachWriteTimeout = 10 * time.Second
)

// frame is one WebSocket frame as received: its payload type and data.
type frame struct {
	typ  byte
	data []byte
}

// frameCodec receives frames with their type (websocket.Message does not say
// which type a frame had).
var frameCodec = websocket.Codec{
	Marshal: func(v any) ([]byte, byte, error) {
		f := v.(frame)
		return f.data, f.typ, nil
	},
	Unmarshal: func(data []byte, typ byte, v any) error {
		f := v.(*frame)
		f.typ, f.data = typ, data
		return nil
	},
}

// attach serves the attach WebSocket: output as binary frames (from ?from=, or a
// redraw of the current screen followed by live output), input from binary frames,
// resize from text frames ({"type":"resize","cols":C,"rows":R}); at the session's
// end a text frame {"type":"exit","exit_code":N}, on a failure {"type":"error"}.
func (c *Controller) attach(w http.ResponseWriter, r *http.Request) {
	node, id, err := target(r)
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	var from *int64
	if r.URL.Query().Has("from") {
		f, err := queryInt(r, "from")
		if err != nil {
			c.reply(w, r, nil, err)
			return
		}
		from = &f
	}
	who := httpPrincipal(r)
	var s api.Session
	if err := c.call(r.Context(), who, node, "get", api.SessionRequest{Session: id}, &s, c.cfg.RequestTimeout); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		c.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "attach is a WebSocket: send Upgrade: websocket"))
		return
	}
	c.reqWG.Add(1) // a hijacked connection: http.Server.Shutdown does not wait for it
	defer c.reqWG.Done()
	srv := websocket.Server{
		Handshake: func(*websocket.Config, *http.Request) error { return nil }, // Origin checked by guard
		Handler: func(ws *websocket.Conn) {
			ws.MaxPayloadBytes = api.MaxInputBytes // one client frame
			c.attachConn(r.Context(), ws, who, c.stillValid(r), node, id, from)
		},
	}
	srv.ServeHTTP(w, r)
}

// valid reports whether the attach's credential is still accepted: every input,
// resize and output frame checks it first.
func (c *Controller) attachConn(rctx context.Context, ws *websocket.Conn, who principal, valid func() bool, node, id string, from *int64) {
	defer ws.Close()
	ctx, cancel := context.WithCancel(rctx)
	defer cancel()
	defer context.AfterFunc(c.streamCtx, cancel)()
	send := func(f frame) error {
		ws.SetWriteDeadline(time.Now().Add(attachWriteTimeout))
		return frameCodec.Send(ws, f)
	}
	sendMsg := func(m api.AttachMsg) {
		b, _ := json.Marshal(m)
		send(frame{typ: websocket.TextFrame, data: b})
	}

	// Input: the client's frames, in order, on a goroutine owned by this attach.
	inputDone := make(chan struct{})
	go func() {
		defer close(inputDone)
		defer cancel() // the client went away: stop streaming
		for {
			var f frame
			if err := frameCodec.Receive(ws, &f); err != nil {
				return
			}
			if !valid() {
				sendMsg(api.AttachMsg{Type: api.AttachError, Error: errRevoked})
				return
			}
			var err error
			switch f.typ {
			case websocket.BinaryFrame:
				err = c.call(ctx, who, node, "input", api.InputRequest{Session: id, Data: string(f.data), Attach: true}, nil, c.cfg.RequestTimeout)
			case websocket.TextFrame:
				var m api.AttachMsg
				if json.Unmarshal(f.data, &m) != nil || m.Type != api.AttachResize {
					err = api.Errorf(api.CodeBadRequest, "text frames are JSON messages: {\"type\":\"resize\",\"cols\":C,\"rows\":R}")
					break
				}
				err = c.call(ctx, who, node, "resize", api.ResizeRequest{Session: id, Cols: m.Cols, Rows: m.Rows}, nil, c.cfg.RequestTimeout)
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

	start, err := c.attachStart(ctx, who, node, id, from, send)
	if err == nil {
		var end streamEnd
		end, err = c.follow(ctx, who, node, id, start, func(_ int64, p []byte) error {
			if !valid() {
				return errRevoked
			}
			c.metrics.streamBytes.Add(float64(len(p)))
			return send(frame{typ: websocket.BinaryFrame, data: p})
		})
		if err == nil && end.exited {
			sendMsg(api.AttachMsg{Type: api.AttachExit, ExitCode: end.exitCode})
		}
	}
	if ae, ok := err.(*api.Error); ok && ctx.Err() == nil {
		sendMsg(api.AttachMsg{Type: api.AttachError, Error: ae})
	}
	ws.Close() // ends the input goroutine's Receive
	<-inputDone
}

// attachStart sends what an attaching terminal sees first and returns the offset
// live output starts at: with from, nothing (output from there); otherwise a redraw
// of the current screen.
func (c *Controller) attachStart(ctx context.Context, who principal, node, id string, from *int64, send func(frame) error) (int64, error) {
	if from != nil {
		return *from, nil
	}
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
	return s.OutputOffset, send(frame{typ: websocket.BinaryFrame, data: []byte(b.String())})
}
