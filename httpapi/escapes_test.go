package httpapi_test

import (
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// Terminal escapes an attacker puts in a title: OSC 52 writes the reader's
// clipboard, ESC[2J clears the screen, C1 CSI and a bidi override do the same
// without an ESC byte.
const (
	osc52       = "\x1b]52;c;Y3VybCBldmlsIHwgc2gK\x07"
	eraseScreen = "\x1b[2J"
	c1CSI       = "\u009b2J"
	rlo         = "\u202e"
)

// TestSessionTextRefused is the input half of issue 15 #14: the node refuses a
// title, description or label with control characters, through the HTTP API, and
// changes nothing.
func TestSessionTextRefused(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	for _, body := range []map[string]any{
		{"node": "n1", "title": osc52},
		{"node": "n1", "title": "ok" + c1CSI},
		{"node": "n1", "description": "x" + eraseScreen},
		{"node": "n1", "labels": map[string]string{"k": rlo + "v"}},
		{"node": "n1", "labels": map[string]string{"k": "a\nb"}},
	} {
		e := f.APIErr(400, api.CodeBadRequest, "POST", "/v1/sessions", body)
		if !strings.Contains(e.Message, "control character") {
			t.Errorf("create %q: %q does not say why", body, e.Message)
		}
	}
	var list api.SessionList
	f.Must(200, "GET", "/v1/sessions", nil, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("refused creates left sessions: %+v", list.Sessions)
	}
	s := f.NewSession("n1")
	path := "/v1/sessions/n1/" + s.ID
	f.APIErr(400, api.CodeBadRequest, "PATCH", path, map[string]any{"title": eraseScreen})
	f.APIErr(400, api.CodeBadRequest, "PATCH", path, map[string]any{"description": osc52})
	f.APIErr(400, api.CodeBadRequest, "PATCH", path, map[string]any{"labels": map[string]string{"k": c1CSI}})
	var got api.Session
	f.Must(200, "PATCH", path, map[string]any{"title": "fine", "description": "two\nlines\tand a tab"}, &got)
	if got.Title != "fine" || got.Description != "two\nlines\tand a tab" {
		t.Fatalf("a plain title and a multiline description: %+v", got)
	}
}
