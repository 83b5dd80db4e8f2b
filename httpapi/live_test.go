package httpapi_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/replay"
)

// dialLive opens GET path/live offering protos, with the fixture's token (when
// token is true) and Origin.
func (f *fixture) dialLive(t *testing.T, path string, hdr http.Header, protos ...string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	if hdr == nil {
		hdr = http.Header{"Origin": {f.Base}, "Authorization": {"Bearer " + f.Token}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(f.Base, "http")+path+"/live", &websocket.DialOptions{HTTPHeader: hdr, Subprotocols: protos})
}

// liveEvent is one event of a live stream, as a player sees it: its time since the
// stream started, code and data (ALiS reset: "reset" with the init as data).
type liveEvent struct {
	t          time.Duration
	code       string
	data       string
	cols, rows int
}

// alisParser parses an ALiS v1 stream as asciinema-player 3.x's alis.js does:
// the magic, a reset frame, then events with relative times (µs), all LEB128.
type alisParser struct {
	magic bool
	t     time.Duration
}

func (p *alisParser) parse(b []byte) (liveEvent, error) {
	if !p.magic {
		if string(b) != "ALiS\x01" {
			return liveEvent{}, fmt.Errorf("not the ALiS v1 magic: %q", b)
		}
		p.magic = true
		return liveEvent{code: "magic"}, nil
	}
	r := bytes.NewReader(b[1:])
	uv := func() uint64 {
		v, err := binary.ReadUvarint(r)
		if err != nil {
			panic(err)
		}
		return v
	}
	str := func() string {
		n := uv()
		s := make([]byte, n)
		if k, _ := r.Read(s); uint64(k) != n && n > 0 {
			panic("short string")
		}
		return string(s)
	}
	switch b[0] {
	case 0x01:
		_ = uv() // last id
		p.t = time.Duration(uv()) * time.Microsecond
		cols, rows := int(uv()), int(uv())
		if theme, _ := r.ReadByte(); theme != 0 {
			return liveEvent{}, fmt.Errorf("theme format %d", theme)
		}
		return liveEvent{t: p.t, code: "reset", cols: cols, rows: rows, data: str()}, nil
	case 'o', 'm':
		_ = uv()
		p.t += time.Duration(uv()) * time.Microsecond
		return liveEvent{t: p.t, code: string(b[0]), data: str()}, nil
	case 'r':
		_ = uv()
		p.t += time.Duration(uv()) * time.Microsecond
		return liveEvent{t: p.t, code: "r", cols: int(uv()), rows: int(uv())}, nil
	case 'x':
		_ = uv()
		p.t += time.Duration(uv()) * time.Microsecond
		return liveEvent{t: p.t, code: "x", data: fmt.Sprint(uv())}, nil
	case 0x04:
		return liveEvent{t: p.t, code: "eot"}, nil
	}
	return liveEvent{}, fmt.Errorf("unknown frame type %#x", b[0])
}

// v3Parser parses a v3.asciicast stream as asciinema-player's asciicast-v3.js does.
type v3Parser struct {
	header bool
	t      time.Duration
}

func (p *v3Parser) parse(b []byte) (liveEvent, error) {
	if !p.header {
		var h struct {
			Version int
			Term    struct{ Cols, Rows int }
		}
		if err := json.Unmarshal(b, &h); err != nil || h.Version != 3 {
			return liveEvent{}, fmt.Errorf("not a v3 header: %q (%v)", b, err)
		}
		p.header = true
		return liveEvent{code: "reset", cols: h.Term.Cols, rows: h.Term.Rows}, nil
	}
	var ev [3]any
	if err := json.Unmarshal(b, &ev); err != nil {
		return liveEvent{}, fmt.Errorf("event %q: %v", b, err)
	}
	iv, _ := ev[0].(float64)
	code, _ := ev[1].(string)
	data, _ := ev[2].(string)
	if iv < 0 {
		return liveEvent{}, fmt.Errorf("negative interval in %q", b)
	}
	p.t += time.Duration(iv * float64(time.Second))
	return liveEvent{t: p.t, code: code, data: data}, nil
}

// liveStream reads a live stream's events until it closes.
type liveStream struct {
	mu     sync.Mutex
	events []liveEvent
	err    error // the parse error or the close
	done   chan struct{}
}

func readLive(ws *websocket.Conn, parse func([]byte) (liveEvent, error)) *liveStream {
	ls := &liveStream{done: make(chan struct{})}
	go func() {
		defer close(ls.done)
		for {
			_, b, err := ws.Read(context.Background())
			var ev liveEvent
			if err == nil {
				ev, err = parse(b)
			}
			ls.mu.Lock()
			if err != nil {
				ls.err = err
				ls.mu.Unlock()
				return
			}
			ls.events = append(ls.events, ev)
			ls.mu.Unlock()
		}
	}()
	return ls
}

// output is the stream's output so far: the reset's init (the screen) apart, then
// every "o" event's data.
func (ls *liveStream) output() (screen, out string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var b strings.Builder
	for i, ev := range ls.events {
		switch {
		case ev.code == "reset":
			screen = ev.data
		case ev.code == "o" && i <= 2 && screen == "" && b.Len() == 0 && strings.Contains(ev.data, "\x1b"):
			screen = ev.data // v3: the screen is the first output event
		case ev.code == "o":
			b.WriteString(ev.data)
		}
	}
	return screen, b.String()
}

// TestLive: both subprotocols, with a real WebSocket client, parsed as
// asciinema-player parses them: the terminal's size and the current screen first,
// then the live output exactly as the session wrote it (the parsed stream is the
// session's raw output from where it began, byte for byte), times that never go
// back, then the exit status, the end (ALiS EOT) and a normal close.
func TestLive(t *testing.T) {
	for _, proto := range []string{httpapi.ProtoALiS, httpapi.ProtoV3} {
		t.Run(proto, func(t *testing.T) {
			f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
			var s api.Session
			f.Must(201, "POST", "/v1/sessions", api.NewSession{Node: "n1", CreateRequest: api.CreateRequest{Shell: "bash", Cols: 90, Rows: 20}}, &s)
			f.Run("n1", s.ID, "echo before-live")
			path := "/v1/sessions/n1/" + s.ID
			ws, _, err := f.dialLive(t, path, nil, "raw", proto)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.CloseNow()
			if ws.Subprotocol() != proto {
				t.Fatalf("subprotocol %q, want %q", ws.Subprotocol(), proto)
			}
			var parse func([]byte) (liveEvent, error)
			if proto == httpapi.ProtoALiS {
				parse = (&alisParser{}).parse
			} else {
				parse = (&v3Parser{}).parse
			}
			ls := readLive(ws, parse)
			testutil.Eventually(t, 10*time.Second, func() bool { sc, _ := ls.output(); return strings.Contains(sc, "before-live") }, "the current screen first")
			// A resize reaches the player as an "r" event.
			f.Must(200, "POST", path+"/resize", api.ResizeBody{Cols: 100, Rows: 30}, nil)
			testutil.Eventually(t, 10*time.Second, func() bool {
				ls.mu.Lock()
				defer ls.mu.Unlock()
				for _, ev := range ls.events {
					if ev.code == "r" {
						return ev.cols == 100 && ev.rows == 30 || ev.data == "100x30"
					}
				}
				return false
			}, "a resize event")
			// The block the typed command makes gets a marker, as in the recording.
			var bl api.BlockList
			f.Must(200, "GET", path+"/blocks", nil, &bl)
			// (Its first output comes half a second after its start: the marker's
			// news, a moment after the start, is there before it however loaded
			// the machine is.)
			f.Must(200, "POST", path+"/input", api.InputBody{Data: "sleep 0.5; printf 'live-%s é\\n' $((6*7)); exit 5\n"}, nil)
			select {
			case <-ls.done:
			case <-time.After(20 * time.Second):
				t.Fatal("the stream did not end with the session")
			}
			if cs := websocket.CloseStatus(ls.err); cs != websocket.StatusNormalClosure {
				t.Errorf("ended with %v, want a normal close", ls.err)
			}
			_, out := ls.output()
			if !strings.Contains(out, "live-42 é\r\n") {
				t.Errorf("live output %q lacks the command's", out)
			}
			// The stream's output is the session's output from where it began.
			code, raw := f.Do("GET", path+"/output?from=0", nil)
			if code != 200 || !strings.HasSuffix(string(raw), out) || len(out) == 0 {
				t.Errorf("the stream's output (%d bytes) is not the end of the session's (%d bytes, %d)", len(out), len(raw), code)
			}
			ls.mu.Lock()
			defer ls.mu.Unlock()
			var codes []string
			var last time.Duration
			for _, ev := range ls.events {
				if ev.code == "r" {
					continue // its place among the output depends on the poll
				}
				if ev.code != "o" || len(codes) == 0 || codes[len(codes)-1] != "o" {
					codes = append(codes, ev.code)
				}
				if ev.t < last {
					t.Errorf("time went back: %v after %v", ev.t, last)
				}
				last = ev.t
			}
			want := "reset o m o x"
			if proto == httpapi.ProtoALiS {
				want = "magic reset o m o x eot"
			}
			// The marker: its label as the recording's, right before the block's
			// first byte.
			var before strings.Builder
			var mark *liveEvent
			for i, ev := range ls.events[1:] {
				if ev.code == "m" {
					mark = &ls.events[i+1]
					break
				}
				if ev.code == "o" && (i > 0 || proto == httpapi.ProtoALiS) {
					before.WriteString(ev.data)
				}
			}
			wantLabel := fmt.Sprintf("block %d: sleep 0.5; printf 'live-%%s é\\n' $((6*7)); exit 5", len(bl.Blocks)+1)
			if mark == nil || mark.data != wantLabel {
				t.Errorf("marker %+v, want label %q", mark, wantLabel)
			} else if n, _, _, ok := replay.MarkerBlock(mark.data); !ok || n != len(bl.Blocks)+1 {
				t.Errorf("the marker's label %q does not read back as block %d", mark.data, len(bl.Blocks)+1)
			}
			var after api.BlockResult
			f.Must(200, "GET", fmt.Sprintf("%s/blocks/%d", path, len(bl.Blocks)+1), nil, &after)
			if at := int64(len(raw)-len(out)) + int64(before.Len()); at != after.Block.Start {
				t.Errorf("the marker is at output offset %d, the block starts at %d", at, after.Block.Start)
			}
			if strings.Join(codes, " ") != want {
				t.Errorf("events %v, want %s", codes, want)
			}
			if first := ls.events[len(ls.events)-1]; proto == httpapi.ProtoV3 && first.data != "5" ||
				proto == httpapi.ProtoALiS && ls.events[len(ls.events)-2].data != "5" {
				t.Errorf("exit status: %+v", ls.events[len(ls.events)-2:])
			}
			for _, ev := range ls.events {
				if ev.code == "reset" && (ev.cols != 90 || ev.rows != 20) {
					t.Errorf("reset %dx%d, want 90x20", ev.cols, ev.rows)
				}
			}
		})
	}
}

// TestLiveRefused: a request that is not a WebSocket, offers neither subprotocol,
// comes from another origin or has no token is refused before the upgrade; a
// viewer's token may watch, and a message from the client ends the stream (it is
// read-only).
func TestLiveRefused(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	s := f.NewSession("n1")
	path := "/v1/sessions/n1/" + s.ID
	f.APIErr(400, api.CodeBadRequest, "GET", path+"/live", nil)
	if _, resp, err := f.dialLive(t, path, nil, "v2.asciicast"); err == nil || resp == nil || resp.StatusCode != 400 {
		t.Errorf("no subprotocol of ours: %v %v", resp, err)
	}
	if _, resp, err := f.dialLive(t, path, http.Header{"Origin": {"http://evil.example"}, "Authorization": {"Bearer " + f.Token}}, httpapi.ProtoV3); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Errorf("cross-origin: %v %v", resp, err)
	}
	if _, resp, err := f.dialLive(t, path, http.Header{"Origin": {f.Base}}, httpapi.ProtoV3); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("no token: %v %v", resp, err)
	}
	if _, resp, err := f.dialLive(t, "/v1/sessions/n1/nope", nil, httpapi.ProtoV3); err == nil || resp == nil || resp.StatusCode != 404 {
		t.Errorf("unknown session: %v %v", resp, err)
	}
	viewer := f.newToken("watcher", api.RoleViewer, "")
	ws, _, err := f.dialLive(t, path, http.Header{"Origin": {f.Base}, "Authorization": {"Bearer " + viewer}}, httpapi.ProtoV3)
	if err != nil {
		t.Fatalf("a viewer's live stream: %v", err)
	}
	defer ws.CloseNow()
	ls := readLive(ws, (&v3Parser{}).parse)
	testutil.Eventually(t, 10*time.Second, func() bool { ls.mu.Lock(); defer ls.mu.Unlock(); return len(ls.events) >= 1 }, "the header")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = ws.Write(ctx, websocket.MessageBinary, []byte("echo typed-by-a-viewer\r"))
	select {
	case <-ls.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a message from the viewer did not end the stream")
	}
	if cs := websocket.CloseStatus(ls.err); cs != websocket.StatusPolicyViolation {
		t.Errorf("closed with %v, want policy violation", ls.err)
	}
	var sc api.Screen
	f.Must(200, "GET", path+"/screen", nil, &sc)
	if strings.Contains(sc.Text, "typed-by-a-viewer") {
		t.Error("a viewer's message reached the session")
	}
}

// TestLiveSlowViewer: a viewer that stops reading never slows the session (a command
// writing 40 MB finishes while it does not read), and is cut off with 1013 (try again
// later) and a reason saying so, instead of buffering without bound.
func TestLiveSlowViewer(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	path := "/v1/sessions/n1/" + s.ID
	ws, _, err := f.dialLive(t, path, nil, httpapi.ProtoALiS)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)
	// Not reading: the command must finish all the same.
	res := f.Run("n1", s.ID, "head -c 40000000 /dev/zero | tr '\\0' x; echo; echo slow-done")
	if res.Block.ExitCode == nil || !strings.Contains(res.Text, "slow-done") {
		t.Fatalf("the command did not finish while a viewer did not read: %+v", res.Block)
	}
	var got int
	var err2 error
	for {
		var b []byte
		_, b, err2 = ws.Read(context.Background())
		if err2 != nil {
			break
		}
		got += len(b)
	}
	if cs := websocket.CloseStatus(err2); cs != websocket.StatusTryAgainLater || !strings.Contains(err2.Error(), "slow consumer") {
		t.Errorf("ended with %v after %d bytes, want 1013 and the reason", err2, got)
	}
	if got >= 40000000 {
		t.Errorf("the slow viewer got all %d bytes: nothing was cut", got)
	}
}

// TestRecordingRoute: GET …/recording answers the whole recording as one asciicast
// file to a viewer, also once the session is closed: v3 with a marker per block
// carrying its exit code, or v2 with format=v2.
func TestRecordingRoute(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	s := f.NewSession("n1")
	f.Run("n1", s.ID, "echo recorded; (exit 3)")
	path := "/v1/sessions/n1/" + s.ID
	viewer := f.newToken("watcher", api.RoleViewer, "")
	var cast []byte
	f.as(viewer, func() {
		testutil.Eventually(t, 10*time.Second, func() bool {
			var code int
			code, cast = f.Do("GET", path+"/recording", nil)
			return code == 200 && bytes.Contains(cast, []byte(`"m", "block 1: echo recorded; (exit 3) ⏎ exit 3"]`))
		}, "the recording with block 1's marker and exit")
	})
	if !bytes.HasPrefix(cast, []byte(`{"version":3,"term":{"cols":`)) {
		t.Errorf("recording: %.200s", cast)
	}
	f.Must(200, "DELETE", path, nil, nil)
	f.as(viewer, func() {
		code, v2 := f.Do("GET", path+"/recording?format=v2", nil)
		if code != 200 || !bytes.HasPrefix(v2, []byte(`{"version":2,"width":`)) || !bytes.Contains(v2, []byte("recorded\\r\\n")) {
			t.Errorf("a closed session's recording as v2: %d %.200s", code, v2)
		}
	})
}
