package holder

import (
	"bytes"
	"strings"
	"testing"
)

func TestRing(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		writes []string
		from   int64
		max    int
		want   string
		wantAt int64
	}{
		{"empty", 8, nil, 0, 10, "", 0},
		{"grows", 8, []string{"abc", "de"}, 0, 10, "abcde", 0},
		{"from middle", 8, []string{"abcde"}, 2, 2, "cd", 2},
		{"fills exactly", 4, []string{"ab", "cd"}, 0, 10, "abcd", 0},
		{"wraps", 4, []string{"abc", "def"}, 0, 10, "cdef", 2},
		{"wraps by one big write", 4, []string{"a", "bcdefgh"}, 0, 10, "efgh", 4},
		{"after wrap from inside", 4, []string{"abcdef", "gh"}, 5, 10, "fgh", 5},
		{"past end", 4, []string{"ab"}, 9, 10, "", 2},
		{"grows to its size, no further", 600, []string{strings.Repeat("a", 300), strings.Repeat("b", 300), strings.Repeat("c", 100)}, 0, 1000,
			strings.Repeat("a", 200) + strings.Repeat("b", 300) + strings.Repeat("c", 100), 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(tt.size)
			for _, w := range tt.writes {
				r.write([]byte(w))
			}
			at, got := readAll(r, tt.from, tt.max)
			if string(got) != tt.want || at != tt.wantAt {
				t.Fatalf("read(%d,%d) = %d %q, want %d %q", tt.from, tt.max, at, got, tt.wantAt, tt.want)
			}
			if cap(r.buf) > tt.size {
				t.Fatalf("ring grew to %d > %d", cap(r.buf), tt.size)
			}
		})
	}
}

// readAll reads up to max bytes from offset from.
func readAll(r *ring, from int64, max int) (int64, []byte) {
	buf := make([]byte, max)
	at, n := r.read(from, buf)
	return at, buf[:n]
}

// FuzzRing checks the ring against a plain slice of everything written.
func FuzzRing(f *testing.F) {
	f.Add([]byte("hello world"), uint8(5), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, size, cut uint8) {
		n := int(size%32) + 1
		r := newRing(n)
		var all []byte
		for len(data) > 0 {
			k := min(len(data), int(cut%7)+1)
			r.write(data[:k])
			all = append(all, data[:k]...)
			data = data[k:]
		}
		at, got := readAll(r, 0, 1<<20)
		wantAt := max(0, len(all)-n)
		if cap(r.buf) > n {
			t.Fatalf("ring of %d grew to %d", n, cap(r.buf))
		}
		if at != int64(wantAt) || !bytes.Equal(got, all[wantAt:]) {
			t.Fatalf("ring of %d: read %d %q, want %d %q", n, at, got, wantAt, all[wantAt:])
		}
	})
}

// FuzzParseChunk: no stream message makes the parser panic or give a negative
// offset.
func FuzzParseChunk(f *testing.F) {
	f.Add(byte('O'), []byte("\x00\x00\x00\x00\x00\x00\x00\x05hi"))
	f.Add(byte('X'), []byte(`{"code":7,"end":12}`))
	f.Add(byte('X'), []byte(`{"end":-1}`))
	f.Fuzz(func(t *testing.T, kind byte, body []byte) {
		ch, err := parseChunk(kind, body)
		if err == nil && ch.Off < 0 {
			t.Fatalf("negative offset %d", ch.Off)
		}
	})
}
