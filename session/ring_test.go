package session

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestRingMatchesReference(t *testing.T) {
	for _, size := range []int{1, 7, 64, 1000, 5000} {
		for _, base := range []int64{0, 3, 12345} {
			testRingAgainstReference(t, size, base, 300, rand.New(rand.NewPCG(uint64(base), uint64(size))))
		}
	}
}

// testRingAgainstReference writes random pieces to a ring that starts at offset base
// (a session reattached to a holder's output) and checks every read against all the
// bytes written, and that the ring never holds more than its size.
func testRingAgainstReference(t *testing.T, size int, base int64, rounds int, rng *rand.Rand) {
	t.Helper()
	r := newRing(size)
	r.end = base
	all := make([]byte, base) // offsets below base were never in this ring
	for i := 0; i < rounds; i++ {
		p := make([]byte, rng.IntN(3*size+2))
		for k := range p {
			p[k] = byte(rng.IntN(256))
		}
		r.write(p)
		all = append(all, p...)
		if r.end != int64(len(all)) {
			t.Fatalf("size %d: end %d, want %d", size, r.end, len(all))
		}
		if len(r.buf) > size || cap(r.buf) > size || r.start() < base {
			t.Fatalf("size %d base %d: holds %d (cap %d) from %d", size, base, len(r.buf), cap(r.buf), r.start())
		}
		from := r.start() + int64(rng.IntN(len(r.buf)+1))
		asked := rng.IntN(2*size + 1)
		got, err := r.read(from, asked)
		if err != nil {
			t.Fatalf("read(%d): %v", from, err)
		}
		if int64(len(got)) != min(int64(asked), r.end-from) {
			t.Fatalf("size %d: read(%d, %d) gave %d bytes (end %d)", size, from, asked, len(got), r.end)
		}
		if from <= int64(len(all)) {
			want := all[from:min(int64(len(all)), from+int64(len(got)))]
			if !bytes.Equal(got, want) {
				t.Fatalf("size %d: read(%d) = %q, want %q", size, from, got, want)
			}
		}
	}
}

func TestRingTruncated(t *testing.T) {
	r := newRing(4)
	r.write([]byte("abcdefgh"))
	_, err := r.read(2, 10)
	var te *TruncatedError
	if !errors.Is(err, ErrTruncated) || !errors.As(err, &te) || te.Oldest != 4 || te.From != 2 {
		t.Fatalf("read(2) err = %v, want truncated with oldest 4", err)
	}
	got, err := r.read(4, 10)
	if err != nil || string(got) != "efgh" {
		t.Fatalf("read(4) = %q, %v", got, err)
	}
	if got, err := r.read(8, 10); err != nil || got != nil {
		t.Fatalf("read(end) = %q, %v; want nothing", got, err)
	}
}

// A ring grows with its output: little output, little memory.
func TestRingGrows(t *testing.T) {
	r := newRing(8 << 20)
	r.write([]byte("$ "))
	if cap(r.buf) > ringMinGrow {
		t.Fatalf("a ring holding 2 bytes allocated %d", cap(r.buf))
	}
	r.write(make([]byte, 100<<10))
	if cap(r.buf) > 256<<10 {
		t.Fatalf("a ring holding 100 KiB allocated %d", cap(r.buf))
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
		testRingAgainstReference(t, int(size), base%(1<<20), 40, rand.New(rand.NewPCG(seed, uint64(size))))
	})
}
