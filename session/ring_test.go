package session

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestRingMatchesReference(t *testing.T) {
	for _, size := range []int{1, 7, 64, 1000} {
		r := newRing(size)
		var all []byte
		rng := rand.New(rand.NewPCG(1, uint64(size)))
		for i := 0; i < 300; i++ {
			p := make([]byte, rng.IntN(3*size+2))
			for k := range p {
				p[k] = byte(rng.IntN(256))
			}
			r.write(p)
			all = append(all, p...)
			if r.end != int64(len(all)) {
				t.Fatalf("size %d: end %d, want %d", size, r.end, len(all))
			}
			from := r.start() + int64(rng.IntN(size+1))
			got, err := r.read(from, rng.IntN(2*size+1))
			if err != nil {
				t.Fatalf("read(%d): %v", from, err)
			}
			if from <= int64(len(all)) {
				want := all[from:min(int64(len(all)), from+int64(len(got)))]
				if !bytes.Equal(got, want) {
					t.Fatalf("size %d: read(%d) = %q, want %q", size, from, got, want)
				}
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
