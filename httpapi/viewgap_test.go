package httpapi_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestFakeViewSkipsAGoneGap: a terminal's view whose follow lost output the
// node no longer has (a flood outran it, under load) goes on, redrawn, from
// where the output is now. On the old code the attach ended with the node's
// "gone" error, and the view showed nothing after it.
func TestFakeViewSkipsAGoneGap(t *testing.T) {
	f, bus := newFakeFixture(t, map[string]int{"n1": 1}, nil)
	var mu sync.Mutex // guards out, gone and screen: the responders run on the controller's goroutines
	out := []byte("hello\r\n")
	gone := int64(0) // output before it is no longer readable
	screen := "SCREEN-ONE"
	bus.handle("n1", "get", func(context.Context, map[string]string, []byte) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		return json.Marshal(api.Session{Node: "n1", ID: "s1", State: api.StateRunning, OutputOffset: int64(len(out))})
	})
	bus.handle("n1", "screen", func(context.Context, map[string]string, []byte) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		return json.Marshal(api.Screen{Text: screen, Cols: 80, Rows: 24})
	})
	bus.handle("n1", "read", func(_ context.Context, _ map[string]string, data []byte) ([]byte, error) {
		var r api.ReadRequest
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if r.From < gone {
			return nil, api.Errorf(api.CodeGone, "output at offset %d is no longer in the scrollback (oldest %d)", r.From, gone)
		}
		from := min(r.From, int64(len(out)))
		return json.Marshal(api.ReadReply{Offset: r.From, Data: out[from:], End: int64(len(out))})
	})
	// emit appends p to the output (readable at once) and publishes it.
	emit := func(p string) {
		mu.Lock()
		off := len(out)
		out = append(out, p...)
		mu.Unlock()
		if err := bus.Publish(api.Subjects{}.Out("n1", "s1"), map[string]string{api.HeaderOffset: strconv.Itoa(off)}, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	view := f.dialAttach(t, "/v1/sessions/n1/s1")
	defer view.Close()
	now := make(chan struct{})
	close(now)
	rv := readWhenTold(view, now, true)
	testutil.Eventually(t, 10*time.Second, func() bool { return rv.has("SCREEN-ONE") }, "the first redraw (got %v)", rv)
	// A burst the follow missed and the node no longer keeps: only its last
	// message reaches the follow.
	mu.Lock()
	out = append(out, strings.Repeat("x", 5000)...)
	gone, screen = int64(len(out)), "SCREEN-TWO"
	mu.Unlock()
	emit("AFTER-GAP")
	testutil.Eventually(t, 10*time.Second, func() bool { return rv.has("SCREEN-TWO") }, "the redraw after the gap (got %v)", rv)
	emit("LIVE-MORE")
	testutil.Eventually(t, 10*time.Second, func() bool { return rv.has("LIVE-MORE") }, "output after the gap (got %v)", rv)
	rv.mu.Lock()
	msgs, got := rv.msgs, rv.out.String()
	rv.mu.Unlock()
	if len(msgs) > 0 || strings.Contains(got, "xxx") {
		t.Fatalf("the view got messages %q or the bytes the node no longer had: %q", msgs, got)
	}
}
