package policy

import (
	"bytes"
	"testing"
)

func TestEscapeLen(t *testing.T) {
	tests := []struct {
		in    string
		n     int
		whole bool
	}{
		{"\x1b", 0, false},
		{"\x1b[", 0, false},
		{"\x1b[0", 0, false},
		{"\x1b[0m", 4, true},
		{"\x1b[?2004h", 8, true},
		{"\x1b[01;31mAKIA", 8, true},
		{"\x1b(B", 3, true},
		{"\x1b(", 0, false},
		{"\x1b=", 2, true},
		{"\x1b]0;title\x07", 0, true}, // OSC is text
		{"\x1bP", 0, true},
		{"\x1b[1\x00m", 0, true},
		{"\x1b\x1b[0m", 0, true},
		{"\x1b[" + string(bytes.Repeat([]byte("1"), 70)) + "m", 0, true},
		{"\x1b[" + string(bytes.Repeat([]byte("1"), 50)), 0, false},
	}
	for _, tt := range tests {
		if n, whole := escapeLen([]byte(tt.in)); n != tt.n || whole != tt.whole {
			t.Errorf("escapeLen(%q) = %d, %v; want %d, %v", tt.in, n, whole, tt.n, tt.whole)
		}
	}
}

// FuzzProject checks the projection: visible bytes and gaps rebuild the input, orig
// finds each visible byte, and a prefix projects to a prefix (what makes redaction
// the same in any chunks).
func FuzzProject(f *testing.F) {
	f.Add([]byte("\x1b[01;31mAKIA\x1b[m\x1b[KIOSF\x1b(B\x1b]0;t\x07\x1b"), uint16(9))
	f.Add([]byte("\x1b[27me\x1b[27mc\x1b[27mh\x1b[27mo"), uint16(3))
	f.Fuzz(func(t *testing.T, in []byte, k uint16) {
		pr := project(in, true, nil)
		var rebuilt []byte
		v := 0
		for _, g := range pr.gaps {
			rebuilt = append(rebuilt, pr.vis[v:g.at]...)
			rebuilt = append(rebuilt, in[g.from:g.to]...)
			v = g.at
		}
		rebuilt = append(rebuilt, pr.vis[v:]...)
		if !bytes.Equal(rebuilt, in) || pr.cut != len(in) {
			t.Fatalf("rebuilt %q from %q (cut %d)", rebuilt, in, pr.cut)
		}
		for v := range pr.vis {
			if o := pr.orig(v); in[o] != pr.vis[v] {
				t.Fatalf("orig(%d) = %d: %q, want %q", v, o, in[o], pr.vis[v])
			}
		}
		if pr.orig(len(pr.vis)) != len(in) {
			t.Fatalf("orig(end) = %d, want %d", pr.orig(len(pr.vis)), len(in))
		}
		cut := int(k) % (len(in) + 1)
		p1 := project(in[:cut], false, nil)
		if !bytes.HasPrefix(pr.vis, p1.vis) || p1.orig(len(p1.vis)) != p1.cut {
			t.Fatalf("prefix %q projects to %q, not a prefix of %q", in[:cut], p1.vis, pr.vis)
		}
	})
}
