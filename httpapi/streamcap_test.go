package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestStreamsPerPrincipal performs a viewer's attack on the controller's memory
// over real WebSockets: it opens live streams of a session by the hundred and
// never reads them (each may queue megabytes for it; 300 took the controller
// from 110 to 410 MB resident on a session printing fast). Now one principal
// holds at most httpapi.MaxPrincipalStreams streams: the next is refused with
// 429, and another principal's stream is not.
func TestStreamsPerPrincipal(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	viewer := f.newToken("watcher", api.RoleViewer, "")
	var s api.Session
	f.Must(201, "POST", "/v1/sessions", api.NewSession{Node: "n1", CreateRequest: api.CreateRequest{Shell: "bash"}}, &s)
	path := "/v1/sessions/n1/" + s.ID
	hdr := http.Header{"Origin": {f.Base}, "Authorization": {"Bearer " + viewer}}
	var open []*websocket.Conn
	defer func() {
		for _, ws := range open {
			ws.CloseNow()
		}
	}()
	for i := range httpapi.MaxPrincipalStreams + 1 {
		ws, resp, err := f.dialLive(t, path, hdr, httpapi.ProtoV3)
		if err != nil {
			if i < httpapi.MaxPrincipalStreams {
				t.Fatalf("live stream %d: %v", i, err)
			}
			if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("the stream past the cap: %v (%v), want 429", err, resp)
			}
			break
		}
		open = append(open, ws)
	}
	if len(open) > httpapi.MaxPrincipalStreams {
		t.Fatalf("one viewer holds %d live streams open", len(open))
	}
	ws, _, err := f.dialLive(t, path, nil, httpapi.ProtoV3) // another principal
	if err != nil {
		t.Fatalf("another principal's stream: %v", err)
	}
	ws.CloseNow()
	open[0].CloseNow()
	open = open[1:]
	testutil.Eventually(t, 10*time.Second, func() bool {
		ws, _, err := f.dialLive(t, path, hdr, httpapi.ProtoV3)
		if err == nil {
			open = append(open, ws)
		}
		return err == nil
	}, "a closed stream gives its slot back")
}
