package replay

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// pooledBuf passes every byte in order whatever the sizes of the writes, and holds
// a buffer only while bytes wait in it.
func TestPooledBuf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var out, want bytes.Buffer
	p := &pooledBuf{w: &out}
	for i := range 200 {
		b := make([]byte, []int{0, 1, 100, bufSize - 1, bufSize, 3 * bufSize}[rng.IntN(6)])
		for k := range b {
			b[k] = byte(rng.IntN(256))
		}
		if n, err := p.Write(b); n != len(b) || err != nil {
			t.Fatalf("write %d: %d, %v", len(b), n, err)
		}
		want.Write(b)
		if out.Len()+p.Buffered() != want.Len() {
			t.Fatalf("after write %d: %d out + %d buffered, want %d", i, out.Len(), p.Buffered(), want.Len())
		}
		if rng.IntN(4) == 0 {
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			if p.buf != nil || p.Buffered() != 0 {
				t.Fatal("a flushed pooledBuf holds a buffer")
			}
		}
	}
	if err := p.Flush(); err != nil || !bytes.Equal(out.Bytes(), want.Bytes()) {
		t.Fatalf("flush: %v; %d bytes out, want %d", err, out.Len(), want.Len())
	}
}

type shortWriter struct{ n int }

func (f *shortWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return f.n, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

// A failed write out keeps what was not written and reports the error.
func TestPooledBufError(t *testing.T) {
	p := &pooledBuf{w: &shortWriter{n: 10}}
	if _, err := p.Write([]byte("0123456789abcdef")); err != nil {
		t.Fatal(err) // buffered only
	}
	if err := p.Flush(); err == nil || p.Buffered() != 6 {
		t.Fatalf("flush: %v, %d buffered; want an error and 6", err, p.Buffered())
	}
}

// A recording whose events were flushed holds no buffer.
func TestWriterIdleHoldsNoBuffer(t *testing.T) {
	var out bytes.Buffer
	w, err := NewWriter(&out, Header{Width: 80, Height: 24})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Output(time.Millisecond, []byte("$ ")); err != nil {
		t.Fatal(err)
	}
	if w.Buffered() == 0 || w.bw.buf == nil {
		t.Fatal("an event was not buffered")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if w.bw.buf != nil {
		t.Fatal("a flushed Writer holds its buffer")
	}
}
