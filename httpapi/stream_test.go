package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// follower reads a follow stream into a buffer.
type follower struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	err  error // the body's end: io.EOF for a clean end
	done chan struct{}
	hdr  http.Header
}

func (f *fixture) follow(ctx context.Context, path string, from int64, slow <-chan struct{}) *follower {
	f.T.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s%s/output?from=%d&follow=1", f.Base, path, from), nil)
	if err == nil {
		req.Header.Set("Authorization", "Bearer "+f.Token)
	}
	if err != nil {
		f.T.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.T.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		f.T.Fatalf("follow: %d %s", resp.StatusCode, b)
	}
	fw := &follower{done: make(chan struct{}), hdr: resp.Header}
	go func() {
		defer close(fw.done)
		defer resp.Body.Close()
		if slow != nil {
			<-slow // do not read until told: the stream backs up
		}
		p := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(p)
			fw.mu.Lock()
			fw.buf.Write(p[:n])
			if err != nil {
				fw.err = err
			}
			fw.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return fw
}

func (fw *follower) bytes() []byte {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return bytes.Clone(fw.buf.Bytes())
}

// rawOutput reads a session's whole output with non-follow reads.
func (f *fixture) rawOutput(path string) []byte {
	f.T.Helper()
	var out []byte
	for {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s%s/output?from=%d", f.Base, path, len(out)), nil)
		req.Header.Set("Authorization", "Bearer "+f.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			f.T.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			f.T.Fatalf("output: %d %s", resp.StatusCode, b)
		}
		end, _ := strconv.ParseInt(resp.Header.Get(api.HeaderEnd), 10, 64)
		out = append(out, b...)
		if len(b) == 0 || int64(len(out)) >= end {
			return out
		}
	}
}

// getOutput sends GET path/output?query (not following) and returns the headers and
// the whole body; a body shorter than its Content-Length fails the test.
func (f *fixture) getOutput(path, query string) (http.Header, []byte) {
	f.T.Helper()
	req, _ := http.NewRequest("GET", f.Base+path+"/output?"+query, nil)
	req.Header.Set("Authorization", "Bearer "+f.Token)
	resp, err := f.HTTP.Do(req)
	if err != nil {
		f.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.T.Fatalf("output?%s: read after %d bytes: %v", query, len(b), err)
	}
	if resp.StatusCode != 200 {
		f.T.Fatalf("output?%s: %d %s", query, resp.StatusCode, b)
	}
	return resp.Header, b
}

// TestOutputWholeRange: a read without follow returns every byte from `from` to the
// end as it stood when the request arrived, however many of the node's read pages
// that takes (api.MaxReadBytes each), or exactly max_bytes of them.
func TestOutputWholeRange(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	path := "/v1/sessions/n1/" + s.ID
	br := f.Run("n1", s.ID, "seq 1 300000") // 2 MB with the PTY's \r\n: four pages
	if br.Block.ExitCode == nil || *br.Block.ExitCode != 0 {
		t.Fatalf("run: %+v", br.Block)
	}
	var seq bytes.Buffer
	for i := 1; i <= 300000; i++ {
		fmt.Fprintf(&seq, "%d\r\n", i)
	}

	hdr, all := f.getOutput(path, "from=0")
	end, _ := strconv.Atoi(hdr.Get(api.HeaderEnd))
	if len(all) != end || end < 3*api.MaxReadBytes {
		t.Fatalf("from=0 gave %d bytes, Fleetmux-End %d (want all of them, over 3 pages of %d)", len(all), end, api.MaxReadBytes)
	}
	if hdr.Get(api.HeaderOffset) != "0" {
		t.Fatalf("Fleetmux-Offset %q", hdr.Get(api.HeaderOffset))
	}
	at := bytes.Index(all, seq.Bytes())
	if at < 0 {
		t.Fatal("the output lacks seq's output, byte for byte")
	}
	if end-(at+seq.Len()) > 4096 {
		t.Fatalf("seq's output ends at %d of %d: more than a prompt follows", at+seq.Len(), end)
	}

	// Small ranges, each within one page, put together are the same bytes.
	var pieces []byte
	for len(pieces) < len(all) {
		h, b := f.getOutput(path, fmt.Sprintf("from=%d&max_bytes=300000", len(pieces)))
		if len(b) == 0 || len(b) > 300000 || h.Get(api.HeaderOffset) != strconv.Itoa(len(pieces)) {
			t.Fatalf("piece at %d: %d bytes, offset %q", len(pieces), len(b), h.Get(api.HeaderOffset))
		}
		pieces = append(pieces, b...)
	}
	if !bytes.Equal(pieces, all) {
		t.Fatalf("pieces differ from the whole at %d", firstDiff(pieces, all))
	}

	// max_bytes across pages, from the middle of one.
	hdr, mid := f.getOutput(path, "from=1000&max_bytes=700000")
	if !bytes.Equal(mid, all[1000:701000]) {
		t.Fatalf("from=1000&max_bytes=700000: %d bytes, differ at %d", len(mid), firstDiff(mid, all[1000:701000]))
	}
	if hdr.Get(api.HeaderEnd) != strconv.Itoa(end) {
		t.Fatalf("Fleetmux-End %q with max_bytes, want the output's end %d", hdr.Get(api.HeaderEnd), end)
	}
	// The tail from the middle of a page, and nothing past the end.
	if _, tail := f.getOutput(path, fmt.Sprintf("from=%d", end-api.MaxReadBytes-17)); !bytes.Equal(tail, all[end-api.MaxReadBytes-17:]) {
		t.Fatalf("tail: %d bytes, differ at %d", len(tail), firstDiff(tail, all[end-api.MaxReadBytes-17:]))
	}
	if h, past := f.getOutput(path, fmt.Sprintf("from=%d", end+10)); len(past) != 0 || h.Get(api.HeaderEnd) != strconv.Itoa(end) {
		t.Fatalf("past the end: %d bytes, Fleetmux-End %q", len(past), h.Get(api.HeaderEnd))
	}
	f.APIErr(400, api.CodeBadRequest, "GET", path+"/output?max_bytes=-1", nil)
}

// TestFollowGapFree: a follower that does not read while megabytes of output go
// by still gets every byte once, in order (the controller drops live messages it
// cannot hold and reads that range from the node); the stream ends cleanly when
// the session ends. (Kept under the node's 8 MiB scrollback: see the node's
// recorder lag limit in the closing notes.)
func TestFollowGapFree(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil},
		Config: func(c *controller.Config) { c.FollowBuffer = 4 }}) // a slow client overflows the live buffer at once
	s := f.NewSession("n1")
	path := "/v1/sessions/n1/" + s.ID
	slow := make(chan struct{})
	fw := f.follow(context.Background(), path, 0, slow)
	if fw.hdr.Get(api.HeaderOffset) != "0" {
		t.Fatalf("offset header %q", fw.hdr.Get(api.HeaderOffset))
	}
	br := f.Run("n1", s.ID, "seq 1 500000")
	if br.Block.ExitCode == nil || *br.Block.ExitCode != 0 {
		t.Fatalf("run: %+v", br.Block)
	}
	close(slow)
	f.Run("n1", s.ID, "echo the-end")
	want := f.rawOutput(path) // the session is idle: its output is complete
	testutil.Eventually(t, 30*time.Second, func() bool { return len(fw.bytes()) >= len(want) }, "the follower to catch up")
	f.Must(200, "DELETE", path, nil, nil)
	select {
	case <-fw.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end with the session")
	}
	if !errors.Is(fw.err, io.EOF) {
		t.Fatalf("the stream ended with %v, want a clean end", fw.err)
	}
	got := fw.bytes()
	if !bytes.Equal(got[:len(want)], want) || !bytes.Contains(got, []byte("the-end\r\n")) {
		t.Fatalf("followed %d bytes, the session has %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	if !bytes.Contains(got, []byte("\r\n499999\r\n500000\r\n")) {
		t.Fatal("the output lacks the end of seq")
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestFollowResume: a follower that reconnects from the offset it reached gets the
// rest, nothing twice.
func TestFollowResume(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	path := "/v1/sessions/n1/" + s.ID
	ctx, cancel := context.WithCancel(context.Background())
	fw := f.follow(ctx, path, 0, nil)
	f.Run("n1", s.ID, "echo first")
	testutil.Eventually(t, 10*time.Second, func() bool { return bytes.Contains(fw.bytes(), []byte("first\r\n")) }, "first output")
	cancel()
	<-fw.done
	part := fw.bytes()
	f.Run("n1", s.ID, "echo second")
	fw2 := f.follow(context.Background(), path, int64(len(part)), nil)
	if fw2.hdr.Get(api.HeaderOffset) != strconv.Itoa(len(part)) {
		t.Fatalf("resumed at %s, asked %d", fw2.hdr.Get(api.HeaderOffset), len(part))
	}
	want := f.rawOutput(path)
	testutil.Eventually(t, 10*time.Second, func() bool { return len(part)+len(fw2.bytes()) >= len(want) }, "the rest")
	if got := append(part, fw2.bytes()...); !bytes.Equal(got, want) || !bytes.Contains(got, []byte("second\r\n")) {
		t.Fatalf("resumed stream differs at %d (%d vs %d bytes)", firstDiff(got, want), len(got), len(want))
	}
}

// TestShutdownEndsStreams: the API's Shutdown does not wait for streams to end by
// themselves.
func TestShutdownEndsStreams(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	fw := f.follow(context.Background(), "/v1/sessions/n1/"+s.ID, 0, nil)
	ws := f.dialAttach(t, "/v1/sessions/n1/"+s.ID)
	defer ws.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := f.API.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown took %v with streams open", d)
	}
	select {
	case <-fw.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the follow stream outlived the controller")
	}
}

func (f *fixture) dialAttach(t *testing.T, path string) *wsConn {
	t.Helper()
	hdr := http.Header{"Origin": {f.Base}}
	if f.Token != "" {
		hdr.Set("Authorization", "Bearer "+f.Token)
	}
	ws, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(f.Base, "http")+path+"/attach", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	// As the Go client reads (client/attach.go): a view's frame may hold up to
	// 256 KiB of output, more than coder/websocket's default 32 KiB.
	ws.SetReadLimit(16 << 20)
	return &wsConn{ws}
}

// TestAttach: raw bytes both ways over the WebSocket, resize, and the exit message.
func TestAttach(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	f.Run("n1", s.ID, "echo before-attach")
	path := "/v1/sessions/n1/" + s.ID
	ws := f.dialAttach(t, path)
	defer ws.Close()

	var (
		mu     sync.Mutex
		out    bytes.Buffer
		msgs   []api.AttachMsg
		closed = make(chan struct{})
	)
	go func() {
		defer close(closed)
		for {
			var fr wsFrame
			err := ws.receive(&fr)
			if err != nil {
				return
			}
			frame := fr.data
			mu.Lock()
			if fr.typ == websocket.MessageText {
				var m api.AttachMsg
				json.Unmarshal(frame, &m)
				msgs = append(msgs, m)
			} else {
				out.Write(frame)
			}
			mu.Unlock()
		}
	}()
	seen := func(s string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return strings.Contains(out.String(), s) }
	}
	// The redraw of the current screen comes first.
	testutil.Eventually(t, 10*time.Second, seen("before-attach"), "the screen redraw")
	if err := ws.send([]byte("echo attach-$((6*7))\r")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, seen("attach-42"), "typed command's output")
	if err := ws.send(`{"type":"resize","cols":91,"rows":27}`); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		var got api.Session
		f.Must(200, "GET", path, nil, &got)
		return got.Cols == 91 && got.Rows == 27
	}, "the resize")
	ws.send(`{"type":"bogus"}`)
	if err := ws.send([]byte("exit 7\r")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("attach did not end with the session")
	}
	mu.Lock()
	defer mu.Unlock()
	var exit, bad *api.AttachMsg
	for i := range msgs {
		switch msgs[i].Type {
		case "exit":
			exit = &msgs[i]
		case "error":
			bad = &msgs[i]
		}
	}
	if exit == nil || exit.ExitCode == nil || *exit.ExitCode != 7 {
		t.Fatalf("exit message: %+v (all: %+v)", exit, msgs)
	}
	if bad == nil || bad.Error.Code != api.CodeBadRequest {
		t.Fatalf("a bogus message got no error message: %+v", msgs)
	}
}

type wsFrame struct {
	typ  websocket.MessageType
	data []byte
}

// wsConn is a test's attach connection, a client of github.com/coder/websocket
// like the Go client's.
type wsConn struct{ c *websocket.Conn }

func (w *wsConn) Close() error { return w.c.CloseNow() }

// receive reads the next message.
func (w *wsConn) receive(fr *wsFrame) (err error) {
	fr.typ, fr.data, err = w.c.Read(context.Background())
	return err
}

// send sends p as one binary message, a string as one text message.
func (w *wsConn) send(v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch v := v.(type) {
	case []byte:
		return w.c.Write(ctx, websocket.MessageBinary, v)
	case string:
		return w.c.Write(ctx, websocket.MessageText, []byte(v))
	}
	return fmt.Errorf("send %T", v)
}

// TestFollowConfirmsExit: an "exited" event on a session's event subject that
// the node did not mean (anyone who can get a message there: a JetStream
// request's reply subject is the asker's choice) does not end a follower; the
// node is asked, says the session runs, and the follow goes on until the real end.
func TestFollowConfirmsExit(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	path := "/v1/sessions/n1/" + s.ID
	fw := f.follow(context.Background(), path, 0, nil)
	f.Run("n1", s.ID, "echo before")
	testutil.Eventually(t, 10*time.Second, func() bool { return bytes.Contains(fw.bytes(), []byte("before\r\n")) }, "the follower to see the first output")

	nc, err := nats.Connect(f.NATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	forged, _ := json.Marshal(api.SessionEvent{Type: api.EventExited})
	if err := nc.Publish(api.Subjects{}.Event("n1", s.ID), forged); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Run("n1", s.ID, "echo after-the-forgery")
	testutil.Eventually(t, 10*time.Second, func() bool { return bytes.Contains(fw.bytes(), []byte("after-the-forgery\r\n")) }, "the follower to go on after a forged exit")
	select {
	case <-fw.done:
		t.Fatalf("a forged exited event ended the follow (%v)", fw.err)
	default:
	}
	f.Must(200, "DELETE", path, nil, nil)
	select {
	case <-fw.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end with the session")
	}
}
