package httpapi

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/fleetmux/fleetmux/api"
)

// TestLiveClose: how a live stream's end reaches the viewer. A follow that lost
// output the node no longer keeps is a viewer that fell behind (1013, reconnect),
// not a server error: under load a flood outruns the stream's subscription.
func TestLiveClose(t *testing.T) {
	gone := api.Errorf(api.CodeGone, "output at offset 3145747 is no longer in the scrollback (oldest 31304629) and the recording cannot serve it")
	cases := []struct {
		err    error
		status websocket.StatusCode
		reason string
	}{
		{nil, websocket.StatusNormalClosure, "session exited"},
		{errSlow, websocket.StatusTryAgainLater, "slow consumer"},
		{fmt.Errorf("follow: %w", gone), websocket.StatusTryAgainLater, "slow consumer"},
		{errRevoked, websocket.StatusPolicyViolation, "revoked"},
		{api.Errorf(api.CodeUnavailable, "node n1 is not connected"), websocket.StatusInternalError, "unavailable: node n1"},
		{errors.New(strings.Repeat("é", 100)), websocket.StatusInternalError, "é"},
	}
	for _, c := range cases {
		status, reason := liveClose(c.err)
		if status != c.status || !strings.Contains(reason, c.reason) || len(reason) > 123 {
			t.Errorf("liveClose(%v) = %v %q, want %v with %q (at most 123 bytes)", c.err, status, reason, c.status, c.reason)
		}
	}
}
