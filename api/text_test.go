package api

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"build on web-1", "build on web-1"},
		{"héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
		{"\x1b[2J", `\x1b[2J`},
		{"\x1b]52;c;aGk=\x07", `\x1b]52;c;aGk=\x07`},
		{"a\tb\nc\rd", `a\x09b\x0ac\x0dd`},
		{"del\x7f", `del\x7f`},
		{"c1 \u009b2J \u009d52", `c1 \u009b2J \u009d52`},
		{"abc\u202edef\u2066\u200f", `abc\u202edef\u2066\u200f`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`},
		{"\u00a0nbsp stays", "\u00a0nbsp stays"},
	} {
		if got := Printable(c.in); got != c.want {
			t.Errorf("Printable(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestValidText(t *testing.T) {
	for _, c := range []struct {
		s         string
		multiline bool
		bad       string // part of the error; "": valid
	}{
		{s: "build"}, {s: ""}, {s: "日本 ✓"},
		{s: "a\nb", multiline: true}, {s: "a\tb", multiline: true},
		{s: "a\nb", bad: "U+000A at position 2"},
		{s: "\x1b[2J", bad: "U+001B at position 1"},
		{s: "x\x1b]52;c;aGk=\x07", multiline: true, bad: "U+001B"},
		{s: "\u009b2J", multiline: true, bad: "U+009B"},
		{s: "ab\u202e", bad: "U+202E at position 3"},
		{s: "\x7f", bad: "U+007F"},
		{s: "a\xffb", bad: "byte 0xff at position 2 is not UTF-8"},
	} {
		err := ValidText("title", c.s, c.multiline)
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("ValidText(%q, %v): %v", c.s, c.multiline, err)
		case c.bad != "" && (err == nil || !errors.Is(err, ErrBadText) || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("ValidText(%q, %v): %v, want an ErrBadText saying %q", c.s, c.multiline, err, c.bad)
		}
	}
}

func TestValidLabels(t *testing.T) {
	for _, c := range []struct {
		l   map[string]string
		bad string
	}{
		{l: nil}, {l: map[string]string{"env": "prod", "team": "a b"}},
		{l: map[string]string{"bad key": "x"}, bad: "label key"},
		{l: map[string]string{"k": "\x1b[2J"}, bad: "U+001B"},
		{l: map[string]string{"k": "a\nb"}, bad: "U+000A"},
		{l: map[string]string{"k": strings.Repeat("v", MaxLabelValueBytes+1)}, bad: "over"},
	} {
		err := ValidLabels(c.l)
		if c.bad == "" && err != nil || c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("ValidLabels(%q): %v, want %q", c.l, err, c.bad)
		}
	}
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	if ValidLabels(many) == nil {
		t.Errorf("%d labels were accepted", len(many))
	}
}

// FuzzPrintable: what Printable returns is valid UTF-8 without a control
// character, and text ValidText accepts on one line comes back unchanged.
func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"", "ok", "\x1b]52;c;aGk=\x07", "\u009b\u202e", "\xff", "a\nb\tc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := Printable(s)
		if !utf8.ValidString(p) {
			t.Fatalf("Printable(%q) = %q: not UTF-8", s, p)
		}
		if err := ValidText("x", p, false); err != nil {
			t.Fatalf("Printable(%q) = %q: %v", s, p, err)
		}
		if ValidText("x", s, false) == nil && p != s {
			t.Fatalf("Printable(%q) = %q: valid text was changed", s, p)
		}
	})
}

func TestOneLiners(t *testing.T) {
	for i, tt := range []struct{ got, want string }{
		{Clip("hello", 5), "hello"},
		{Clip("hello!", 5), "hell…"},
		{Clip("héllo wörld", 6), "héllo…"},
		{OneLine("a\nb", 10), "a …"},
		{OneLine("a\n\n", 10), "a"},
		{OneLine("  make test  ", 20), "make test"},
		{OneLine("abcdefghij", 5), "abcd…"},
	} {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}
	for _, tt := range []struct {
		in   string
		want string
		more bool
	}{
		{"\n\n  x y \n", "x y", false},
		{"\n", "", false},
		{"\n  \nhello\nworld", "hello", true},
		{"a\tb\r\n", "a b", false},
		{"a\n\n\n", "a", false},
	} {
		if got, more := FirstLine(tt.in); got != tt.want || more != tt.more {
			t.Errorf("FirstLine(%q) = %q, %v; want %q, %v", tt.in, got, more, tt.want, tt.more)
		}
	}
}
