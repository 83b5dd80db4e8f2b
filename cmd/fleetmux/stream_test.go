package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// fakeAsciinemaServer is an asciinema server's producer endpoint on loopback: it
// accepts a v1.alis WebSocket and keeps every binary message until the close.
type fakeAsciinemaServer struct {
	*httptest.Server
	mu     sync.Mutex
	frames [][]byte
	closed error // the producer's close
	done   chan struct{}
}

func newFakeAsciinemaServer(t *testing.T) *fakeAsciinemaServer {
	s := &fakeAsciinemaServer{done: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws/S/secret-stream-token" {
			http.NotFound(w, r)
			return
		}
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"v1.alis"}})
		if err != nil {
			return
		}
		defer ws.CloseNow()
		defer close(s.done)
		for {
			_, b, err := ws.Read(context.Background())
			s.mu.Lock()
			if err != nil {
				s.closed = err
				s.mu.Unlock()
				return
			}
			s.frames = append(s.frames, b)
			s.mu.Unlock()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestStream: `fleetmux stream NODE/ID` relays the session's ALiS stream to an
// asciinema server: the magic, the reset with the current screen, the output, the
// exit status and EOT, then a normal close when the session ends.
func TestStream(t *testing.T) {
	t.Setenv(envStreamTo, "")
	addr := startDev(t)
	out, errs, err := runArgs(t, "new", "--addr", addr)
	if err != nil {
		t.Fatalf("new: %v %s", err, errs)
	}
	s := strings.TrimSpace(out)
	if _, errs, err := runArgs(t, "run", s, "--addr", addr, "--", "echo before-stream"); err != nil {
		t.Fatalf("run: %v %s", err, errs)
	}
	srv := newFakeAsciinemaServer(t)
	t.Setenv(envStreamTo, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws/S/secret-stream-token")
	res := make(chan error, 1)
	go func() {
		_, _, err := runArgs(t, "stream", s, "--addr", addr)
		res <- err
	}()
	testutil.Eventually(t, 20*time.Second, func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.frames) >= 2 }, "the magic and the reset")
	if _, errs, err := runArgs(t, "send", s, "--addr", addr, "echo streamed-$((6*7)); exit 4\n"); err != nil {
		t.Fatalf("send: %v %s", err, errs)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stream did not end with the session")
	}
	<-srv.done
	srv.mu.Lock()
	defer srv.mu.Unlock()
	fr := srv.frames
	if string(fr[0]) != "ALiS\x01" || fr[1][0] != 0x01 || !bytes.Contains(fr[1], []byte("before-stream")) {
		t.Fatalf("first frames %q, %q: want the magic and a reset with the screen", fr[0], fr[1][:min(len(fr[1]), 40)])
	}
	var output []byte
	var exit bool
	for _, f := range fr[2:] {
		switch f[0] {
		case 'o':
			output = append(output, f...)
		case 'x':
			exit = true
		}
	}
	if !bytes.Contains(output, []byte("streamed-42")) || !exit || !bytes.Equal(fr[len(fr)-1], []byte{0x04}) {
		t.Errorf("relayed %d frames: output has streamed-42 %v, exit %v, last %q", len(fr), bytes.Contains(output, []byte("streamed-42")), exit, fr[len(fr)-1])
	}
	if websocket.CloseStatus(srv.closed) != websocket.StatusNormalClosure {
		t.Errorf("the relay ended with %v, want a normal close", srv.closed)
	}
}

// TestStreamUsage: no destination, or one that is not a WebSocket URL, is a usage
// error (exit 2) before anything connects.
func TestStreamUsage(t *testing.T) {
	t.Setenv(envStreamTo, "")
	for _, args := range [][]string{
		{"stream", "here/s1"},
		{"stream", "here/s1", "--to", "http://127.0.0.1:1/ws"},
		{"stream"},
	} {
		if _, _, err := runArgs(t, args...); exitCode(err) != 2 {
			t.Errorf("%q: exit %d (%v), want 2", args, exitCode(err), err)
		}
	}
}
