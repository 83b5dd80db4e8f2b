package controller

import (
	"errors"
	"testing"

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
