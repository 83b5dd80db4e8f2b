package session

import (
	"errors"
	"testing"

	"github.com/fleetmux/fleetmux/internal/ring"
)

func TestReadScrollbackTruncated(t *testing.T) {
	r := ring.New(4)
	r.Write([]byte("abcdefgh"))
	_, err := readScrollback(r, 2, 10)
	var te *TruncatedError
	if !errors.Is(err, ErrTruncated) || !errors.As(err, &te) || te.Oldest != 4 || te.From != 2 {
		t.Fatalf("read(2) err = %v, want truncated with oldest 4", err)
	}
	got, err := readScrollback(r, 4, 10)
	if err != nil || string(got) != "efgh" {
		t.Fatalf("read(4) = %q, %v", got, err)
	}
	if got, err := readScrollback(r, 8, 10); err != nil || got != nil {
		t.Fatalf("read(end) = %q, %v; want nothing", got, err)
	}
}
