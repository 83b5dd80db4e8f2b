package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// stalledReader reads an attach only once let go, keeping what came.
type stalledReader struct {
	mu   sync.Mutex
	out  bytes.Buffer
	n    int
	keep bool // keep every byte (else the last 64 KiB or more)
	done chan struct{}
	msgs []string // the text frames (attach messages: errors, the exit)
	end  error    // why reading ended
}

func readWhenTold(ws *wsConn, go_ <-chan struct{}, keep bool) *stalledReader {
	r := &stalledReader{done: make(chan struct{}), keep: keep}
	go func() {
		defer close(r.done)
		<-go_
		for {
			var fr wsFrame
			if err := ws.receive(&fr); err != nil {
				r.mu.Lock()
				r.end = err
				r.mu.Unlock()
				return
			}
			if fr.typ != websocket.MessageBinary {
				r.mu.Lock()
				r.msgs = append(r.msgs, string(fr.data))
				r.mu.Unlock()
				continue
			}
			r.mu.Lock()
			r.n += len(fr.data)
			r.out.Write(fr.data)
			if !r.keep && r.out.Len() > 1<<20 { // the tail is enough to find the last lines in
				tail := bytes.Clone(r.out.Bytes()[r.out.Len()-64<<10:])
				r.out.Reset()
				r.out.Write(tail)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *stalledReader) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Contains(r.out.String(), s)
}

// String says what the reader got besides output, and how its reading ended.
func (r *stalledReader) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	tail := r.out.Bytes()[max(0, r.out.Len()-300):]
	return fmt.Sprintf("%d bytes, messages %q, reading ended: %v, last bytes %q", r.n, r.msgs, r.end, tail)
}

func (r *stalledReader) bytes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// TestAttachViewRedrawnWhenBehind: a terminal's attach that stops reading while the
// session prints does not get what it missed when it reads again: its queue dropped
// what it could not take and it gets the current screen instead (the command's last
// line shows). On the old code every byte was queued for it. An attach from an
// offset (?from=) still gets every byte, in order.
func TestAttachViewRedrawnWhenBehind(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	f.Run("n1", s.ID, "echo ready")
	path := "/v1/sessions/n1/" + s.ID
	offset := func() int64 {
		var sess api.Session
		f.Must(http.StatusOK, "GET", path, nil, &sess)
		return sess.OutputOffset
	}
	flood := func(n int, end string) {
		var r api.BlockResult
		f.Must(http.StatusOK, "POST", path+"/run", api.RunBody{Command: "yes " + strings.Repeat("x", 80) + " | head -c " + strconv.Itoa(n) + "; echo " + end + "-$((6*7))",
			TimeoutMS: 120_000, MaxOutputBytes: 256}, &r)
	}

	// From an offset: every byte, in order (more than a view's queue holds).
	from := offset()
	exact := f.dialAttachFrom(t, path, from)
	defer exact.Close()
	now := make(chan struct{})
	close(now)
	re := readWhenTold(exact, now, true)
	flood(1_000_000, "EXACT")
	to := offset()
	testutil.Eventually(t, 30*time.Second, func() bool { return re.bytes() >= int(to-from) }, "the attach from an offset to get every byte")
	want := f.rawOutput(path)[from:to]
	re.mu.Lock()
	if got := re.out.Bytes(); !bytes.Equal(got[:min(len(got), len(want))], want) || len(got) < len(want) {
		t.Errorf("the attach from %d got %d bytes, not the %d the session printed", from, len(got), len(want))
	}
	re.mu.Unlock()
	exact.Close()

	// A view that does not read while the first 2 MB of 8 come (a stall well
	// within the 10 s a write may block for, however slow the machine), then
	// reads again: it was redrawn, and it never gets the bytes it missed.
	const n, stall = 8_000_000, 2_000_000
	view := f.dialAttach(t, path)
	defer view.Close()
	letGo := make(chan struct{})
	rv := readWhenTold(view, letGo, false)
	base := offset()
	ran := make(chan error, 1)
	go func() {
		code, b := f.Do("POST", path+"/run", api.RunBody{Command: "yes " + strings.Repeat("x", 80) + " | head -c " + strconv.Itoa(n) + "; echo END-$((6*7))",
			TimeoutMS: 120_000, MaxOutputBytes: 256})
		if code != http.StatusOK {
			ran <- fmt.Errorf("flood: %d %s", code, b)
		}
		close(ran)
	}()
	testutil.Eventually(t, 60*time.Second, func() bool { return offset() >= base+stall }, "the first 2 MB of output")
	close(letGo)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return rv.has("END-42") }, "the view to show the command's end (it got %v)", rv)
	if got := rv.bytes(); got > n-stall/2 {
		t.Errorf("a view that stopped reading got %d of %d bytes: it was not redrawn", got, n)
	}
	t.Logf("the view that stopped reading got %d bytes of %d", rv.bytes(), n)
}

// dialAttachFrom opens an attach from output offset from (every byte from there).
func (f *fixture) dialAttachFrom(t *testing.T, path string, from int64) *wsConn {
	t.Helper()
	hdr := http.Header{"Origin": {f.Base}, "Authorization": {"Bearer " + f.Token}}
	ws, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(f.Base, "http")+path+"/attach?from="+strconv.FormatInt(from, 10), &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(64 << 20)
	return &wsConn{ws}
}
