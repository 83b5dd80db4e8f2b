package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/coder/websocket"
	"github.com/fleetmux/fleetmux/api"
)

// Subprotocols of GET …/live (httpapi serves them).
const (
	LiveALiS = "v1.alis"
	LiveV3   = "v3.asciicast"
)

// Live opens a session's live stream for players (GET …/live) speaking subprotocol
// (LiveALiS or LiveV3): the current screen, then the live output, resizes and the
// exit status, until a normal close at the session's end. The connection is
// read-only: a message written to it ends it. ctx bounds the dial and the
// connection's life. The caller closes the connection.
func (c *Client) Live(ctx context.Context, node, id, subprotocol string) (*websocket.Conn, error) {
	if subprotocol != LiveALiS && subprotocol != LiveV3 {
		return nil, &Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("live subprotocol %q: want %s or %s", subprotocol, LiveALiS, LiveV3)}
	}
	p, err := sessionPath(node, id, "/live")
	if err != nil {
		return nil, err
	}
	req, err := c.request(ctx, http.MethodGet, p, nil, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Origin", c.base.Scheme+"://"+c.base.Host)
	hc := *c.hc
	hc.Timeout = 0 // a client Timeout would cut the stream; ctx bounds the dial
	ws, resp, err := websocket.Dial(ctx, req.URL.String(), &websocket.DialOptions{
		HTTPClient:   &hc,
		HTTPHeader:   req.Header,
		Subprotocols: []string{subprotocol},
	})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return nil, readError(resp)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("client: live %s/%s: %w", node, id, err)
	}
	ws.SetReadLimit(wsMaxMessage)
	context.AfterFunc(ctx, func() { _ = ws.CloseNow() })
	return ws, nil
}
