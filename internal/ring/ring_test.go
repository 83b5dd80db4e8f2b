package ring

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestReadAt(t *testing.T) {
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
			r := New(tt.size)
			for _, w := range tt.writes {
				r.Write([]byte(w))
			}
			buf := make([]byte, tt.max)
			at, n := r.ReadAt(tt.from, buf)
			if got := buf[:n]; string(got) != tt.want || at != tt.wantAt {
				t.Fatalf("ReadAt(%d,%d) = %d %q, want %d %q", tt.from, tt.max, at, got, tt.wantAt, tt.want)
			}
			if r.Cap() > tt.size {
				t.Fatalf("ring grew to %d > %d", r.Cap(), tt.size)
			}
		})
	}
}

func TestMatchesReference(t *testing.T) {
	for _, size := range []int{1, 7, 64, 1000, 5000} {
		for _, base := range []int64{0, 3, 12345} {
			testAgainstReference(t, size, base, 300, rand.New(rand.NewPCG(uint64(base), uint64(size))))
		}
	}
}

// testAgainstReference writes random pieces to a ring that starts at offset base (a
// session reattached to a holder's output) and checks every read against all the
// bytes written, and that the ring never holds more than its size.
func testAgainstReference(t *testing.T, size int, base int64, rounds int, rng *rand.Rand) {
	t.Helper()
	r := NewAt(size, base)
	all := make([]byte, base) // offsets below base were never in this ring
	for i := 0; i < rounds; i++ {
		p := make([]byte, rng.IntN(3*size+2))
		for k := range p {
			p[k] = byte(rng.IntN(256))
		}
		r.Write(p)
		all = append(all, p...)
		if r.End() != int64(len(all)) {
			t.Fatalf("size %d: end %d, want %d", size, r.End(), len(all))
		}
		held := int(r.End() - r.Start())
		if held > size || r.Cap() > size || r.Start() < base {
			t.Fatalf("size %d base %d: holds %d (cap %d) from %d", size, base, held, r.Cap(), r.Start())
		}
		from := r.Start() + int64(rng.IntN(held+1))
		asked := rng.IntN(2*size + 1)
		buf := make([]byte, asked)
		at, n := r.ReadAt(from, buf)
		if at != from || int64(n) != min(int64(asked), r.End()-from) {
			t.Fatalf("size %d: ReadAt(%d, %d) gave %d bytes at %d (end %d)", size, from, asked, n, at, r.End())
		}
		a, b := r.Slices(from, from+int64(n))
		if got := append(append([]byte{}, a...), b...); !bytes.Equal(got, buf[:n]) {
			t.Fatalf("size %d: Slices(%d) = %q, ReadAt gave %q", size, from, got, buf[:n])
		}
		if want := all[from : from+int64(n)]; !bytes.Equal(buf[:n], want) {
			t.Fatalf("size %d: ReadAt(%d) = %q, want %q", size, from, buf[:n], want)
		}
	}
}

// A ring grows with its output: little output, little memory.
func TestGrows(t *testing.T) {
	r := New(8 << 20)
	r.Write([]byte("$ "))
	if r.Cap() > minGrow {
		t.Fatalf("a ring holding 2 bytes allocated %d", r.Cap())
	}
	r.Write(make([]byte, 100<<10))
	if r.Cap() > 256<<10 {
		t.Fatalf("a ring holding 100 KiB allocated %d", r.Cap())
	}
}

func FuzzRing(f *testing.F) {
	f.Add(uint16(64), int64(0), uint64(1))
	f.Add(uint16(1), int64(7), uint64(2))
	f.Add(uint16(600), int64(1<<40), uint64(3))
	f.Fuzz(func(t *testing.T, size uint16, base int64, seed uint64) {
		if size == 0 || base < 0 || base > 1<<50 {
			return
		}
		testAgainstReference(t, int(size), base%(1<<20), 40, rand.New(rand.NewPCG(seed, uint64(size))))
	})
}

// TestSizeZero: a ring of size 0 holds nothing and counts what was written (it
// divided by zero on its second write, found by proc's FuzzCut).
func TestSizeZero(t *testing.T) {
	r := New(0)
	r.Write([]byte("abc"))
	r.Write([]byte("de"))
	if r.Start() != 5 || r.End() != 5 {
		t.Fatalf("start %d end %d, want 5 5", r.Start(), r.End())
	}
	if a, b := r.Slices(5, 5); len(a)+len(b) != 0 {
		t.Fatalf("slices %q %q", a, b)
	}
}
