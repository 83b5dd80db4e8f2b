package client

// These tests cover what only the client does: decoding error replies a real
// controller does not send (proxies' pages, plain text), Follow's reconnects and
// offset checks against a server that drops the stream, and the WebSocket framing
// (against the servers of golang.org/x/net/websocket and github.com/coder/websocket).
// The API itself is tested end to end against the real controller.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cws "github.com/coder/websocket"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"golang.org/x/net/websocket"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

func TestParseError(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name      string
		status    int
		body      string
		code, msg string
	}{
		{"api envelope", 404, `{"error":{"code":"not_found","message":"no session web-1/s9"}}`, api.CodeNotFound, "no session web-1/s9"},
		{"api code wins over status", 409, `{"error":{"code":"exited","message":"session exited"}}`, api.CodeExited, "session exited"},
		{"html from a proxy", 502, "<html><body>Bad Gateway</body></html>\n", api.CodeUnavailable, "HTTP 502: <html><body>Bad Gateway</body></html>"},
		{"empty 503", 503, "", api.CodeUnavailable, "HTTP 503 Service Unavailable"},
		{"plain 500", 500, "boom\n  at line 3\n", api.CodeInternal, "HTTP 500: boom at line 3"},
		{"plain 504", 504, "upstream timed out", api.CodeTimeout, "HTTP 504: upstream timed out"},
		{"plain 404", 404, "404 page not found\n", api.CodeNotFound, "HTTP 404: 404 page not found"},
		{"plain 401", 401, "no", api.CodeUnauthorized, "HTTP 401: no"},
		{"plain 403", 403, "", api.CodeForbidden, "HTTP 403 Forbidden"},
		{"plain 413", 413, "", api.CodeTooLarge, "HTTP 413 Request Entity Too Large"},
		{"plain 429", 429, "slow down", api.CodeLimit, "HTTP 429: slow down"},
		{"plain 410", 410, "gone", api.CodeGone, "HTTP 410: gone"},
		{"other 4xx", 418, "teapot", api.CodeBadRequest, "HTTP 418: teapot"},
		{"other 5xx", 507, "", api.CodeInternal, "HTTP 507 Insufficient Storage"},
		{"json without error", 500, `{"oops":true}`, api.CodeInternal, `HTTP 500: {"oops":true}`},
		{"error without code", 400, `{"error":{"message":"x"}}`, api.CodeBadRequest, `HTTP 400: {"error":{"message":"x"}}`},
		{"long body is cut", 500, long, api.CodeInternal, "HTTP 500: " + long[:200] + "..."},
		{"invalid utf-8", 500, "a\xffb", api.CodeInternal, "HTTP 500: a?b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := parseError(tt.status, []byte(tt.body))
			if e.Status != tt.status || e.Code != tt.code || e.Message != tt.msg {
				t.Errorf("parseError(%d, %q) = {%d %q %q}, want {%d %q %q}", tt.status, tt.body, e.Status, e.Code, e.Message, tt.status, tt.code, tt.msg)
			}
		})
	}
}

func TestErrorMatching(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &Error{Status: 404, Code: api.CodeNotFound, Message: "no session a/b"})
	if !errors.Is(err, ErrNotFound) {
		t.Error("errors.Is(err, ErrNotFound) is false")
	}
	for _, s := range []error{ErrBusy, ErrGone, ErrUnavailable, ErrBadRequest} {
		if errors.Is(err, s) {
			t.Errorf("errors.Is(not_found, %v) is true", s)
		}
	}
	if !errors.Is(err, &api.Error{Code: api.CodeNotFound}) {
		t.Error("errors.Is(err, &api.Error{not_found}) is false")
	}
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Message != "no session a/b" {
		t.Errorf("errors.As(err, *api.Error) = %v", ae)
	}
	if got := err.Error(); got != "wrapped: not_found: no session a/b" {
		t.Errorf("Error() = %q", got)
	}
}

func TestNewChecksTheAddress(t *testing.T) {
	tests := []struct {
		addr, want, bad string
	}{
		{"", DefaultAddr, ""},
		{"http://127.0.0.1:7070", "http://127.0.0.1:7070", ""},
		{"https://ctl.example:8443/", "https://ctl.example:8443", ""},
		{"http://proxy/fleetmux/", "http://proxy/fleetmux", ""},
		{"10.0.0.1:7070", "http://10.0.0.1:7070", ""},
		{"ftp://x", "", "scheme"},
		{"http://", "", "no host"},
		{"http://u:p@x", "", "token"},
		{"http://x/?a=b", "", "query"},
		{"http://x:bad port", "", "address"},
	}
	for _, tt := range tests {
		c, err := New(Config{Addr: tt.addr})
		switch {
		case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)):
			t.Errorf("New(%q) = %v, want an error about %q", tt.addr, err, tt.bad)
		case tt.bad == "" && err != nil:
			t.Errorf("New(%q): %v", tt.addr, err)
		case tt.bad == "" && c.Addr() != tt.want:
			t.Errorf("New(%q).Addr() = %q, want %q", tt.addr, c.Addr(), tt.want)
		}
	}
}

// newTestClient returns a client of srv whose idle connections close with the test.
func newTestClient(t *testing.T, srv *httptest.Server, token string) *Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := New(Config{Addr: srv.URL, Token: token, Actor: "tester", HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBadNamesNeverReachTheWire(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request %s reached the server", r.URL)
	}))
	defer srv.Close()
	c := newTestClient(t, srv, "")
	ctx := context.Background()
	if _, err := c.Session(ctx, "web.1", "s1"); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "node name") {
		t.Errorf("Session(web.1): %v", err)
	}
	if _, err := c.Run(ctx, "web-1", "s/1", api.RunBody{Command: "x"}); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "session id") {
		t.Errorf("Run(s/1): %v", err)
	}
	if _, err := c.Block(ctx, "web-1", "s1", 0, BlockQuery{}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Block(0): %v", err)
	}
	if _, err := c.Follow(ctx, "web-1", "s1", -1, io.Discard); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Follow(-1): %v", err)
	}
}

func TestRequestsCarryHeadersAndDecodeErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get(api.HeaderActor) != "tester" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/v1/sessions":
			if q := r.URL.Query(); q.Get("node") != "n1" || strings.Join(q["label"], ",") != "a=1,b=2" {
				t.Errorf("query %s", r.URL.RawQuery)
			}
			w.Write([]byte(`{"sessions":[{"node":"n1","id":"s1","state":"idle"}],"unavailable":["n2"]}`))
		case "/v1/sessions/n1/s1/output":
			w.Header().Set(api.HeaderOffset, r.URL.Query().Get("from"))
			w.Header().Set(api.HeaderEnd, "10")
			w.Header().Set(api.HeaderOldest, "2")
			w.Write([]byte("abc"))
		default:
			http.Error(w, "<h1>no such page</h1>", http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv, "tok")
	ctx := context.Background()
	var raw []byte
	l, err := c.Sessions(CaptureReply(ctx, &raw), SessionFilter{Node: "n1", Labels: map[string]string{"b": "2", "a": "1"}})
	if err != nil || len(l.Sessions) != 1 || l.Sessions[0].ID != "s1" || len(l.Unavailable) != 1 {
		t.Fatalf("Sessions = %+v, %v", l, err)
	}
	if !bytes.HasPrefix(raw, []byte(`{"sessions":[`)) {
		t.Errorf("captured reply %q", raw)
	}
	ch, err := c.Output(ctx, "n1", "s1", 7, 0)
	if err != nil || ch.Offset != 7 || ch.End != 10 || ch.Oldest != 2 || string(ch.Data) != "abc" {
		t.Errorf("Output = %+v, %v", ch, err)
	}
	_, err = c.Nodes(ctx)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrUnavailable) || e.Status != 502 || !strings.Contains(e.Message, "no such page") {
		t.Errorf("Nodes on a 502 page: %v", err)
	}
	bad := newTestClient(t, srv, "wrong")
	if _, err := bad.Nodes(ctx); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Nodes with a wrong token: %v", err)
	}
}

// followServer serves a session's output (data) to Follow, one scripted behaviour
// per connection, and the session itself (exited once every script step ran).
type followServer struct {
	t    *testing.T
	data []byte

	mu    sync.Mutex
	steps []func(w http.ResponseWriter, from int64)
	froms []int64 // the from of each output request
	state string
}

func (f *followServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/sessions/n1/s1":
		f.mu.Lock()
		st := f.state
		f.mu.Unlock()
		json.NewEncoder(w).Encode(api.Session{Node: "n1", ID: "s1", State: st, OutputOffset: int64(len(f.data))})
	case "/v1/sessions/n1/s1/output":
		if r.URL.Query().Get("follow") != "1" {
			f.t.Errorf("output request without follow: %s", r.URL)
		}
		from, err := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
		if err != nil {
			f.t.Errorf("from: %v", err)
		}
		f.mu.Lock()
		f.froms = append(f.froms, from)
		if len(f.steps) == 0 {
			f.mu.Unlock()
			f.t.Errorf("an output request after the script ended (from %d)", from)
			http.Error(w, `{"error":{"code":"internal","message":"script over"}}`, 500)
			return
		}
		step := f.steps[0]
		f.steps = f.steps[1:]
		if len(f.steps) == 0 {
			f.state = api.StateExited
		}
		f.mu.Unlock()
		step(w, from)
	default:
		http.NotFound(w, r)
	}
}

// stream sends data[off:to] with offset header off, then ends (drop: abruptly).
func (f *followServer) stream(off, to int64, drop bool) func(http.ResponseWriter, int64) {
	return func(w http.ResponseWriter, from int64) {
		if off < 0 {
			off = from
		}
		w.Header().Set(api.HeaderOffset, strconv.FormatInt(off, 10))
		w.WriteHeader(200)
		w.Write(f.data[off:min(to, int64(len(f.data)))])
		w.(http.Flusher).Flush()
		if drop {
			panic(http.ErrAbortHandler)
		}
	}
}

func newFollowServer(t *testing.T, n int) *followServer {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	return &followServer{t: t, data: data, state: api.StateRunning}
}

func TestFollowReconnectsWithoutGapsOrRepeats(t *testing.T) {
	f := newFollowServer(t, 200_000)
	f.steps = []func(http.ResponseWriter, int64){
		f.stream(-1, 70_000, true), // drops mid-stream
		func(w http.ResponseWriter, _ int64) {
			http.Error(w, "controller restarting", http.StatusServiceUnavailable)
		},
		func(w http.ResponseWriter, _ int64) { panic(http.ErrAbortHandler) }, // drops before any header
		f.stream(60_000, 150_000, true),                                      // resumes earlier than asked: the overlap is dropped
		f.stream(-1, 200_000, false),                                         // the rest, then the session exits
	}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := newTestClient(t, srv, "")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next, err := c.Follow(ctx, "n1", "s1", 1000, &out)
	if err != nil || next != 200_000 {
		t.Fatalf("Follow = %d, %v; want 200000, nil", next, err)
	}
	if !bytes.Equal(out.Bytes(), f.data[1000:]) {
		t.Errorf("Follow wrote %d bytes that are not data[1000:]", out.Len())
	}
	if want := []int64{1000, 70_000, 70_000, 70_000, 150_000}; fmt.Sprint(f.froms) != fmt.Sprint(want) {
		t.Errorf("requests from %v, want %v", f.froms, want)
	}
}

func TestFollowFromZeroMayStartLater(t *testing.T) {
	f := newFollowServer(t, 5000)
	f.steps = []func(http.ResponseWriter, int64){f.stream(3000, 5000, false)}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var out bytes.Buffer
	next, err := newTestClient(t, srv, "").Follow(context.Background(), "n1", "s1", 0, &out)
	if err != nil || next != 5000 || !bytes.Equal(out.Bytes(), f.data[3000:]) {
		t.Fatalf("Follow = %d, %v, %d bytes; want 5000, nil, data[3000:]", next, err, out.Len())
	}
}

func TestFollowRefusesAGap(t *testing.T) {
	for _, from := range []int64{0, 10} {
		f := newFollowServer(t, 5000)
		f.steps = []func(http.ResponseWriter, int64){
			f.stream(-1, 1000, true),
			f.stream(2000, 5000, false), // 1000..2000 is gone
		}
		if from != 0 {
			f.steps = f.steps[1:] // the first connection already skips
		}
		srv := httptest.NewServer(f)
		var out bytes.Buffer
		next, err := newTestClient(t, srv, "").Follow(context.Background(), "n1", "s1", from, &out)
		srv.Close()
		want := int64(1000)
		if from != 0 {
			want = from
		}
		if !errors.Is(err, ErrGone) || next != want || int64(out.Len()) != want-from {
			t.Errorf("from %d: Follow = %d, %v (%d bytes written); want %d and an error matching ErrGone", from, next, err, out.Len(), want)
		}
	}
}

func TestFollowStopsWithTheContextAndOnClientErrors(t *testing.T) {
	f := newFollowServer(t, 10)
	always503 := func(w http.ResponseWriter, _ int64) { http.Error(w, "down", http.StatusServiceUnavailable) }
	f.steps = []func(http.ResponseWriter, int64){always503, always503, always503, always503, always503, always503, always503, always503, always503, always503}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := newTestClient(t, srv, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Follow(ctx, "n1", "s1", 0, io.Discard)
		done <- err
	}()
	testutil.Eventually(t, 10*time.Second, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.froms) >= 2
	}, "Follow to retry")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Follow after cancel: %v", err)
	}

	f2 := newFollowServer(t, 10)
	f2.steps = []func(http.ResponseWriter, int64){
		func(w http.ResponseWriter, _ int64) {
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"code":"not_found","message":"no session n1/s1"}}`))
		},
	}
	srv2 := httptest.NewServer(f2)
	defer srv2.Close()
	if _, err := newTestClient(t, srv2, "").Follow(context.Background(), "n1", "s1", 0, io.Discard); !errors.Is(err, ErrNotFound) {
		t.Errorf("Follow of an unknown session: %v", err)
	}
}

// frame is one WebSocket message as x/net/websocket's server saw it.
type frame struct {
	text bool
	data []byte
}

var frameCodec = websocket.Codec{
	Marshal: func(v any) ([]byte, byte, error) {
		f := v.(frame)
		if f.text {
			return f.data, websocket.TextFrame, nil
		}
		return f.data, websocket.BinaryFrame, nil
	},
	Unmarshal: func(data []byte, typ byte, v any) error {
		*v.(*frame) = frame{text: typ == websocket.TextFrame, data: data}
		return nil
	},
}

// The attach tests run against both WebSocket servers the controller has used
// (golang.org/x/net/websocket and github.com/coder/websocket): the client speaks the
// protocol, not one library's dialect.
func TestAttachAgainstXNetWebSocket(t *testing.T) {
	ws := websocket.Handler(func(conn *websocket.Conn) {
		if err := frameCodec.Send(conn, frame{data: []byte("hello")}); err != nil {
			t.Error(err)
			return
		}
		for {
			var f frame
			if err := frameCodec.Receive(conn, &f); err != nil {
				t.Errorf("server receive: %v", err)
				return
			}
			if !f.text {
				frameCodec.Send(conn, frame{data: f.data}) // echo
				continue
			}
			var m api.AttachMsg
			if err := json.Unmarshal(f.data, &m); err != nil || m.Type != "resize" {
				t.Errorf("text message %q (%v)", f.data, err)
			}
			frameCodec.Send(conn, frame{data: fmt.Appendf(nil, "resized %dx%d", m.Cols, m.Rows)})
			frameCodec.Send(conn, frame{text: true, data: []byte(`{"type":"exit","exit_code":3}`)})
			return
		}
	})
	testAttachEcho(t, ws)
}

func TestAttachAgainstCoderWebSocket(t *testing.T) {
	ws := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := cws.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.CloseNow()
		conn.SetReadLimit(1 << 20)
		ctx := r.Context()
		if err := conn.Write(ctx, cws.MessageBinary, []byte("hello")); err != nil {
			t.Error(err)
			return
		}
		for {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				t.Errorf("server receive: %v", err)
				return
			}
			if typ == cws.MessageBinary {
				conn.Write(ctx, cws.MessageBinary, data) // echo
				continue
			}
			var m api.AttachMsg
			if err := json.Unmarshal(data, &m); err != nil || m.Type != "resize" {
				t.Errorf("text message %q (%v)", data, err)
			}
			conn.Write(ctx, cws.MessageBinary, fmt.Appendf(nil, "resized %dx%d", m.Cols, m.Rows))
			conn.Write(ctx, cws.MessageText, []byte(`{"type":"exit","exit_code":3}`))
			conn.Close(cws.StatusNormalClosure, "")
			return
		}
	})
	testAttachEcho(t, ws)
}

// testAttachEcho drives an attach against ws, a server that sends "hello", echoes
// binary messages and answers a resize with "resized CxR" and an exit message.
func testAttachEcho(t *testing.T, ws http.Handler) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer tok":
			http.Error(w, `{"error":{"code":"unauthorized","message":"token"}}`, http.StatusUnauthorized)
		case r.URL.Path == "/v1/sessions/n1/s1/attach" && r.URL.Query().Get("from") == "42":
			ws.ServeHTTP(w, r)
		default:
			w.WriteHeader(404)
			w.Write([]byte(`{"error":{"code":"not_found","message":"no session"}}`))
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Attach(ctx, "n1", "s9", AttachOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Attach to an unknown session: %v", err)
	}
	from := int64(42)
	a, err := c.Attach(ctx, "n1", "s1", AttachOptions{From: &from})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	readN := func(n int) string {
		t.Helper()
		buf := make([]byte, n)
		if _, err := io.ReadFull(a, buf); err != nil {
			t.Fatalf("read %d bytes: %v", n, err)
		}
		return string(buf)
	}
	if got := readN(5); got != "hello" {
		t.Fatalf("first output %q", got)
	}
	for _, n := range []int{1, 125, 126, 65535, 65536, 200_000} {
		in := bytes.Repeat([]byte{byte(n)}, n)
		if _, err := a.Write(in); err != nil {
			t.Fatal(err)
		}
		if got := readN(n); got != string(in) {
			t.Fatalf("echo of %d bytes differs", n)
		}
	}
	if err := a.Resize(80, 24); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(a)
	if err != nil || string(rest) != "resized 80x24" {
		t.Fatalf("after resize: %q, %v", rest, err)
	}
	if c := a.ExitCode(); c == nil || *c != 3 {
		t.Errorf("ExitCode = %v, want 3", c)
	}
	if err := a.Resize(0, 1); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Resize(0, 1): %v", err)
	}
}

func TestAttachCloseUnblocksRead(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(websocket.Handler(func(conn *websocket.Conn) {
		<-hold
	}))
	defer srv.Close()
	defer close(hold)
	c := newTestClient(t, srv, "")
	ctx, cancel := context.WithCancel(context.Background())
	a, err := c.Attach(ctx, "n1", "s1", AttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	done := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 10))
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Read after the context ended: %v", err)
	}
}

// TestOutputRange: Output and OutputChunks take the whole range in one reply of any
// size, send max_bytes, and call a body shorter than its range (the controller cut
// it when the node went down) an error, never a shorter output.
func TestOutputRange(t *testing.T) {
	data := make([]byte, 3*api.MaxReadBytes+123)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		from, _ := strconv.Atoi(q.Get("from"))
		maxBytes, _ := strconv.Atoi(q.Get("max_bytes"))
		if q.Has("max") {
			t.Errorf("query %s: the parameter is max_bytes", r.URL.RawQuery)
		}
		end := len(data)
		if maxBytes > 0 {
			end = min(end, from+maxBytes)
		}
		w.Header().Set(api.HeaderOffset, strconv.Itoa(from))
		w.Header().Set(api.HeaderEnd, strconv.Itoa(len(data)))
		if r.URL.Path == "/v1/sessions/n1/cut/output" {
			// Chunked, and ends early: what a client sees of an aborted range.
			w.Write(data[from : from+1000])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("Content-Length", strconv.Itoa(end-from))
		w.Write(data[from:end])
	}))
	defer srv.Close()
	c := newTestClient(t, srv, "")
	ctx := context.Background()

	ch, err := c.Output(ctx, "n1", "s1", 5, 0)
	if err != nil || ch.Offset != 5 || ch.End != int64(len(data)) || !bytes.Equal(ch.Data, data[5:]) {
		t.Fatalf("Output(5, 0) = offset %d end %d, %d bytes, %v", ch.Offset, ch.End, len(ch.Data), err)
	}
	ch, err = c.Output(ctx, "n1", "s1", 7, 600000)
	if err != nil || !bytes.Equal(ch.Data, data[7:600007]) {
		t.Fatalf("Output(7, 600000) = %d bytes, %v", len(ch.Data), err)
	}
	ch, err = c.Output(ctx, "n1", "s1", int64(len(data)), 0)
	if err != nil || len(ch.Data) != 0 || ch.Data == nil || ch.End != int64(len(data)) {
		t.Fatalf("Output at the end = %+v, %v", ch, err)
	}

	var got []byte
	next, err := c.OutputChunks(ctx, "n1", "s1", 0, 0, func(ch Chunk) error {
		if ch.Offset != int64(len(got)) || ch.End != int64(len(data)) || len(ch.Data) > api.MaxReadBytes {
			t.Errorf("chunk at %d: offset %d, end %d, %d bytes", len(got), ch.Offset, ch.End, len(ch.Data))
		}
		got = append(got, ch.Data...)
		return nil
	})
	if err != nil || next != int64(len(data)) || !bytes.Equal(got, data) {
		t.Fatalf("OutputChunks = next %d, %d bytes, %v", next, len(got), err)
	}

	stop := errors.New("enough")
	if next, err := c.OutputChunks(ctx, "n1", "s1", 0, 0, func(Chunk) error { return stop }); !errors.Is(err, stop) || next != 0 {
		t.Fatalf("OutputChunks with a failing fn = %d, %v", next, err)
	}

	got = got[:0]
	next, err = c.OutputChunks(ctx, "n1", "cut", 0, 0, func(ch Chunk) error { got = append(got, ch.Data...); return nil })
	if !errors.Is(err, io.ErrUnexpectedEOF) || next != 1000 || !bytes.Equal(got, data[:1000]) {
		t.Fatalf("a range cut short: next %d, %d bytes, %v", next, len(got), err)
	}
	if _, err := c.Output(ctx, "n1", "cut", 0, 0); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Output of a range cut short: %v", err)
	}
}
