package controller

import (
	"errors"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func TestDecodeReply(t *testing.T) {
	type val struct {
		N int `json:"n"`
	}
	for _, c := range []struct {
		name, reply string
		code        string // the *api.Error's code; "" for success
		n           int
	}{
		{"value", `{"n":7}`, "", 7},
		{"value after space", " \n{\"n\":8}", "", 8},
		// Only NATS micro's error headers make an error (TestCallReadsServiceErrors):
		// a body that looks like an error envelope is a value.
		{"error envelope is a value", `{"error":{"code":"busy","message":"a command is running"},"n":4}`, "", 4},
		{"null error is a value", `{"error":null}`, "", 0},
		{"a value with an error field later", `{"n":3,"error":"ignored"}`, "", 3},
		{"malformed value", `{"n":`, api.CodeInternal, 0},
		{"wrong type", `{"n":"x"}`, api.CodeInternal, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v val
			err := decodeReply("n1", "run", []byte(c.reply), &v)
			var ae *api.Error
			switch {
			case c.code == "" && err != nil:
				t.Fatalf("decodeReply(%s): %v", c.reply, err)
			case c.code != "" && (!errors.As(err, &ae) || ae.Code != c.code):
				t.Fatalf("decodeReply(%s): %v, want code %s", c.reply, err, c.code)
			case v.N != c.n:
				t.Fatalf("decodeReply(%s): n %d, want %d", c.reply, v.N, c.n)
			}
		})
	}
	if err := decodeReply("n1", "input", []byte(`{}`), nil); err != nil {
		t.Fatalf("nil out: %v", err)
	}
	// A raw out takes a value as it came (trimmed).
	for _, c := range []struct{ reply, want, code string }{
		{" {\"n\":7}\n", `{"n":7}`, ""},
		{`{"error":{"code":"busy","message":"m"}}`, `{"error":{"code":"busy","message":"m"}}`, ""},
		{`[1]`, "", api.CodeInternal},
		{`{"n":`, "", api.CodeInternal},
		{``, "", api.CodeInternal},
	} {
		var raw rawJSON
		err := decodeReply("n1", "run", []byte(c.reply), &raw)
		var ae *api.Error
		switch {
		case c.code == "" && (err != nil || string(raw) != c.want):
			t.Errorf("raw %q: %q, %v; want %q", c.reply, raw, err, c.want)
		case c.code != "" && (!errors.As(err, &ae) || ae.Code != c.code):
			t.Errorf("raw %q: %v, want code %s", c.reply, err, c.code)
		}
	}
}

// TestUnknownNodeWhileLearning: a controller that has just started and knows no
// node yet answers a request for a node unavailable (try again), not not_found: a
// client following a session across a controller restart took the 404 for "the
// session is gone" and stopped short of the rest of its output.
func TestUnknownNodeWhileLearning(t *testing.T) {
	code := func(c *Controller) string {
		var ae *api.Error
		if err := c.doCall(t.Context(), principal{}, "n1", api.VerbGet, api.SessionRequest{Session: "s1"}, nil, time.Second); !errors.As(err, &ae) {
			t.Fatalf("doCall: %v, want an *api.Error", err)
		}
		return ae.Code
	}
	fresh := &Controller{cfg: Config{LearnWindow: time.Minute}, nodes: newTable(0), born: time.Now()}
	if got := code(fresh); got != api.CodeUnavailable {
		t.Errorf("fresh controller, no node known: %s, want %s", got, api.CodeUnavailable)
	}
	old := &Controller{cfg: Config{LearnWindow: time.Minute}, nodes: newTable(0), born: time.Now().Add(-2 * time.Minute)}
	if got := code(old); got != api.CodeNotFound {
		t.Errorf("after the window: %s, want %s", got, api.CodeNotFound)
	}
	knows := &Controller{cfg: Config{LearnWindow: time.Minute}, nodes: newTable(0), born: time.Now()}
	knows.nodes.observe(Member{Name: "n2", State: api.NodeAlive})
	if got := code(knows); got != api.CodeNotFound {
		t.Errorf("fresh controller that knows another node: %s, want %s", got, api.CodeNotFound)
	}
	off := &Controller{cfg: Config{LearnWindow: -1}, nodes: newTable(0), born: time.Now()}
	if got := code(off); got != api.CodeNotFound {
		t.Errorf("LearnWindow negative: %s, want %s", got, api.CodeNotFound)
	}
}
