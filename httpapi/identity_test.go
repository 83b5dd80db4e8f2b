package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestLongsCountPrincipalNotLabel (review #3): one token's client that gives each
// of its long requests another Fleetmux-Actor label still holds at most
// MaxLongPerPrincipal of them on a node: the rest are refused busy and never
// reach the node.
func TestLongsCountPrincipalNotLabel(t *testing.T) {
	f, bus := newFakeFixture(t, map[string]int{"n1": 1}, nil)
	var held atomic.Int32
	release := make(chan struct{})
	bus.handle("n1", "wait", func(ctx context.Context, _ map[string]string, _ []byte) ([]byte, error) {
		held.Add(1)
		select {
		case <-release:
			return json.Marshal(api.Session{Node: "n1", ID: "s1", State: api.StateIdle})
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	extra := 8
	n := controller.MaxLongPerPrincipal + extra
	codes := make(chan string, n) // the error code of each answer ("" when none)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { // joined below
			defer wg.Done()
			req, _ := http.NewRequest("GET", f.Base+"/v1/sessions/n1/s1/wait?until=exited&timeout_ms=20000", nil)
			req.Header.Set("Authorization", "Bearer "+f.Token)
			req.Header.Set(api.HeaderActor, fmt.Sprintf("agent-%d", i))
			resp, err := f.HTTP.Do(req)
			if err != nil {
				codes <- err.Error()
				return
			}
			defer resp.Body.Close()
			var e api.ErrorReply
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if e.Error == nil {
				codes <- fmt.Sprintf("status %d", resp.StatusCode)
				return
			}
			codes <- e.Error.Code
		}()
	}
	defer func() { close(release); wg.Wait() }()
	busy := 0
	deadline := time.After(15 * time.Second)
	for busy < extra {
		select {
		case c := <-codes:
			if c != api.CodeBusy {
				t.Fatalf("a long request over the cap answered %s, want %s (held at the node: %d)", c, api.CodeBusy, held.Load())
			}
			busy++
		case <-deadline:
			t.Fatalf("%d of %d requests over the cap refused; the node holds %d (cap %d): the cap counts labels, not the token",
				busy, extra, held.Load(), controller.MaxLongPerPrincipal)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return held.Load() == int32(controller.MaxLongPerPrincipal) }, "the capped requests at the node")
}

// TestNodeReplyCannotSpeakForOthers (review #6): an enrolled node that answers its
// session list with a session of another node, and with terminal controls in its
// own sessions' text, has the foreign session dropped (and logged) and its text
// escaped; GET /v1/sessions shows no spoofed session.
func TestNodeReplyCannotSpeakForOthers(t *testing.T) {
	var logBuf syncBuffer
	f, bus := newFakeFixture(t, map[string]int{"vm": 1, "evil": 1}, func(c *controller.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	bus.handle("vm", "list", reply(api.SessionList{Sessions: []api.Session{{Node: "vm", ID: "s2", Title: "real"}}}))
	bus.handle("evil", "list", reply(api.SessionList{Sessions: []api.Session{
		{Node: "vm", ID: "s1", Title: "spoofed"},
		{Node: "evil", ID: "../x", Title: "bad id"},
		{Node: "evil", ID: "s1", Title: "abc\u202efdp.exe", Cwd: "/tmp/\x1b]52;c;ZXZpbA==\x07", CurrentCommand: "ls\x1b[2J",
			Description: "d\x9b", Labels: map[string]string{"team": "\x1b[31mred", "bad key": "x"}},
	}}))
	bus.handle("evil", "get", reply(api.Session{Node: "vm", ID: "s2", Title: "spoofed"}))
	var list api.SessionList
	for range 2 { // the warning is logged once
		f.Must(http.StatusOK, "GET", "/v1/sessions", nil, &list)
	}
	var got []string
	for _, s := range list.Sessions {
		got = append(got, s.Node+"/"+s.ID)
	}
	if strings.Join(got, " ") != "evil/s1 vm/s2" {
		t.Fatalf("sessions %v, want evil/s1 vm/s2 (no spoofed vm/s1, no bad id)", got)
	}
	e := list.Sessions[0]
	for _, text := range []string{e.Title, e.Cwd, e.CurrentCommand, e.Description, e.Labels["team"]} {
		if api.ValidText("text", text, false) != nil {
			t.Errorf("text %q from the node reached the client with its controls", text)
		}
	}
	if e.Title != `abc\u202efdp.exe` || e.Cwd != `/tmp/\x1b]52;c;ZXZpbA==\x07` || len(e.Labels) != 1 {
		t.Errorf("cleaned session %+v: want the controls escaped as api.Printable does, the bad label key dropped", e)
	}
	if n := strings.Count(logBuf.String(), "another node"); n != 1 {
		t.Errorf("%d warnings about the spoofed session, want 1: %s", n, logBuf.String())
	}
	// A single-session reply about another node's session is refused.
	if code, body := f.Do("GET", "/v1/sessions/evil/s2", nil); code == http.StatusOK {
		t.Fatalf("get of evil/s2 answered with vm's session: %s", body)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
