package testutil

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use: a process or a goroutine writes
// while the test reads. The zero value is empty and ready.
type Buffer struct {
	// Tail, when > 0, bounds what is kept: once the buffer grows past twice Tail it
	// keeps only its last Tail bytes (for the logs of long-lived children that are
	// read only to explain a failure).
	Tail int

	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if l.Tail > 0 && l.b.Len() > 2*l.Tail {
		keep := bytes.Clone(l.b.Bytes()[l.b.Len()-l.Tail:])
		l.b.Reset()
		l.b.Write(keep)
	}
	return len(p), nil
}

// String returns what the buffer holds.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Bytes returns a copy of what the buffer holds.
func (l *Buffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

// Len is how many bytes the buffer holds.
func (l *Buffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}
