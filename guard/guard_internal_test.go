package guard

import (
	"context"
	"errors"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"reflect"
	"strings"
	"testing"
)

func TestEditLine(t *testing.T) {
	for _, c := range []struct {
		name, pending, data string
		lines               []string
		rest                string
	}{
		{"plain", "", "ls -l\n", []string{"ls -l"}, ""},
		{"pending", "rm -r", "f /\r", []string{"rm -rf /"}, ""},
		{"no end", "", "echo hi", nil, "echo hi"},
		{"crlf is one line", "", "a\r\nb\r\n", []string{"a", "b"}, ""},
		{"two lines", "", "a\nb\nc", []string{"a", "b"}, "c"},
		{"backspace", "", "rmx\x7f -rf\n", []string{"rm -rf"}, ""},
		{"backspace utf8", "é", "\x7fe\n", []string{"e"}, ""},
		{"ctrl-u", "junk", "\x15ls\n", []string{"ls"}, ""},
		{"ctrl-c", "junk", "\x03", nil, ""},
		{"ctrl-w", "echo foo bar  ", "\x17baz\n", []string{"echo foo baz"}, ""},
		{"arrows dropped", "", "l\x1b[Ds\x1bOA\n", []string{"ls"}, ""},
		{"alt-key dropped", "", "\x1bbls\n", []string{"ls"}, ""},
		{"tab kept", "", "a\tb\n", []string{"a\tb"}, ""},
		{"empty enter", "", "\n", []string{""}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines, rest := editLine([]byte(c.pending), []byte(c.data))
			if !reflect.DeepEqual(lines, c.lines) || string(rest) != c.rest {
				t.Fatalf("editLine(%q, %q) = %q, %q; want %q, %q", c.pending, c.data, lines, rest, c.lines, c.rest)
			}
		})
	}
}

func TestEditLineBounded(t *testing.T) {
	_, rest := editLine(nil, []byte(strings.Repeat("x", 3*maxPending)))
	if len(rest) != maxPending {
		t.Fatalf("pending line of %d bytes, want %d", len(rest), maxPending)
	}
}

func TestExpectLine(t *testing.T) {
	s := &Session{}
	s.ExpectLine("make test\n")
	if s.expected("make") || !s.expected("  make test ") || s.expected("make test") {
		t.Fatal("an expected line is consumed once, when equal")
	}
	for i := 0; i < maxExpected+4; i++ {
		s.ExpectLine("x")
	}
	if len(s.expectedLines) != maxExpected {
		t.Fatalf("%d lines expected, want at most %d", len(s.expectedLines), maxExpected)
	}
}

// TestPolicyNotLoadedRefuses: until the node has read its policy source once,
// nothing is decided: a request that needs a decision is refused, never allowed.
func TestPolicyNotLoadedRefuses(t *testing.T) {
	g := &Guard{cfg: Config{Node: "n1"}, ready: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var e *api.Error
	if err := g.enforce(ctx, nil, Writer{}, "true", nil, nil); !errors.As(err, &e) || e.Code != api.CodeUnavailable {
		t.Fatalf("enforce before the policy is known = %v, want unavailable", err)
	}
	g.SetPolicy(nil)
	if err := g.Loaded(context.Background()); err != nil {
		t.Fatalf("once known: %v", err)
	}
}

func FuzzEditLine(f *testing.F) {
	f.Add([]byte("rm"), []byte(" -rf /\r\n\x1b[A\x7f"))
	f.Fuzz(func(t *testing.T, before, data []byte) {
		_, pending := editLine(nil, before) // a pending line is what typing left
		lines, rest := editLine(pending, data)
		if len(rest) > maxPending {
			t.Fatalf("pending line of %d bytes", len(rest))
		}
		for _, l := range append(lines, string(rest)) {
			if strings.ContainsAny(l, "\r\n\x1b\x7f\x03\x15\x17") {
				t.Fatalf("line %q holds a line end or an editing key", l)
			}
		}
	})
}
