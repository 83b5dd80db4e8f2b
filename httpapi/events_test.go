package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// sseEvent is one server-sent event: its name and data.
type sseEvent struct {
	name string
	data map[string]string
}

// sseStream reads GET /v1/events with token into a list of events.
type sseStream struct {
	mu     sync.Mutex
	events []sseEvent
	done   chan struct{}
	resp   *http.Response
}

func (f *fixture) events(t *testing.T, token string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.Base+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	st := &sseStream{done: make(chan struct{}), resp: resp}
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-st.done })
	if resp.StatusCode != http.StatusOK {
		close(st.done)
		return st
	}
	go func() {
		defer close(st.done)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data)
			case line == "" && ev.name != "":
				st.mu.Lock()
				st.events = append(st.events, ev)
				st.mu.Unlock()
				ev = sseEvent{}
			}
		}
	}()
	return st
}

func (st *sseStream) has(name, node, id string) func() bool {
	return func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, ev := range st.events {
			if ev.name == name && ev.data["node"] == node && (id == "" || ev.data["id"] == id) {
				return true
			}
		}
		return false
	}
}

// TestEventsStream: GET /v1/events tells a viewer, as server-sent events, that a
// session was created and ran a block, that an approval is asked for, and that the
// node table changed; it says where, never what (no command, no output). Without a
// token it is refused.
func TestEventsStream(t *testing.T) {
	f, agent := approvalFixture(t)
	viewer := f.newToken("watcher", api.RoleViewer, "1h")
	st := f.events(t, viewer)
	if st.resp.StatusCode != http.StatusOK || !strings.HasPrefix(st.resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /v1/events: %d %s", st.resp.StatusCode, st.resp.Header.Get("Content-Type"))
	}
	s := f.NewSession("n1")
	testutil.Eventually(t, 10*time.Second, st.has("session", "n1", s.ID), "a session event for the new session")
	path := "/v1/sessions/n1/" + s.ID
	f.heldRun(agent, path, "echo secret-words # needs-ok")
	testutil.Eventually(t, 10*time.Second, st.has("approval", "n1", ""), "an approval event")
	st.mu.Lock()
	for _, ev := range st.events {
		for k, v := range ev.data {
			if k != "node" && k != "id" || strings.Contains(v, "secret-words") {
				t.Errorf("event %s carries %s=%q: events say where, not what", ev.name, k, v)
			}
		}
	}
	st.mu.Unlock()

	// No token: refused.
	var code int
	f.as("", func() { code, _ = f.Do("GET", "/v1/events", nil) })
	if code != http.StatusUnauthorized {
		t.Errorf("GET /v1/events without a token: %d, want 401", code)
	}
}
