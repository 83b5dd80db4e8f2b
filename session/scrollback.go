package session

import (
	"errors"
	"fmt"

	"github.com/fleetmux/fleetmux/internal/ring"
)

// ErrTruncated is matched by errors for reads of output that has already left the
// scrollback ring (the caller must get it from a recording instead).
var ErrTruncated = errors.New("session: output no longer in scrollback")

// TruncatedError reports a read below the oldest offset still held.
type TruncatedError struct {
	From   int64 // the offset asked for
	Oldest int64 // the oldest offset still held
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("session: output at offset %d no longer in scrollback (oldest held: %d)", e.From, e.Oldest)
}

func (e *TruncatedError) Unwrap() error { return ErrTruncated }

// readScrollback copies up to max bytes of r starting at from into a new slice. It
// fails with a *TruncatedError when from is older than r holds; from at or beyond
// its end yields nil.
func readScrollback(r *ring.Ring, from int64, max int) ([]byte, error) {
	if from < r.Start() {
		return nil, &TruncatedError{From: from, Oldest: r.Start()}
	}
	if from >= r.End() || max <= 0 {
		return nil, nil
	}
	a, b := r.Slices(from, min(r.End(), from+int64(max)))
	out := make([]byte, 0, len(a)+len(b))
	return append(append(out, a...), b...), nil
}
