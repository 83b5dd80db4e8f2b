package testutil

import (
	"strings"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("ab"))
			}
		})
	}
	wg.Wait()
	if b.Len() != 800 || b.String() != strings.Repeat("ab", 400) || len(b.Bytes()) != 800 {
		t.Fatalf("len %d, want 800 bytes of ab", b.Len())
	}

	tail := Buffer{Tail: 4}
	for _, s := range []string{"12345", "678", "9"} {
		tail.Write([]byte(s))
	}
	if got := tail.String(); got != "6789" {
		t.Fatalf("Tail 4 after 123456789: %q, want the last 4 bytes", got)
	}
}
