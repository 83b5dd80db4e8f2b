package session

import (
	"regexp"
	"testing"
)

// repositionRE is repositionsIn's rule as a regular expression.
var repositionRE = regexp.MustCompile(`\x1b(\[[\x30-\x3f]*[\x20-\x2f]*[AFHfdrTu]|[M8])`)

func TestRepositions(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"plain\nlines\n", "", false},
		{"\x1b[1;31mred\x1b[0m\n", "\x1b[K\x1b[2J", false}, // colours, erasing: no move back
		{"\x1b]0;title\x07", "", false},
		{"x\x1b[3A", "", true},
		{"", "\x1b[10;1Hframe", true},
		{"\x1b[?25l\x1b[5d", "", true},
		{"\x1b[1;24r", "", true},
		{"\x1bM", "", true},
		{"\x1b8", "", true},
		{"\x1b[", "2A", true}, // cut by the ring's seam
		{"text\x1b[12", ";1H", true},
		{"\x1b[2", "C", false}, // forward: still running down
		{"\x1b", "", false},
	}
	for _, c := range cases {
		if got := repositions([]byte(c.a), []byte(c.b)); got != c.want {
			t.Errorf("repositions(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func FuzzRepositions(f *testing.F) {
	for _, s := range []string{"", "\x1b[3A", "a\x1b[1;2Hb", "\x1b[?1049h", "\x1bM", "\x1b[\x1b[A"} {
		f.Add([]byte(s), 1)
	}
	f.Fuzz(func(t *testing.T, p []byte, cut int) {
		want := repositionRE.Match(p)
		if got := repositionsIn(p); got != want {
			t.Fatalf("repositionsIn(%q) = %v, the rule says %v", p, got, want)
		}
		if len(p) <= 32 && len(p) > 0 {
			k := (cut%len(p) + len(p)) % len(p)
			if got := repositions(p[:k], p[k:]); got != want {
				t.Fatalf("repositions(%q, %q) = %v, want %v", p[:k], p[k:], got, want)
			}
		}
	})
}
