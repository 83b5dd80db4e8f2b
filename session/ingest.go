package session

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/internal/ptyio"
)

// The read path: the loop that owns the PTY master's read side, takes each chunk
// of output into the session (ring, redaction, marks) and records the end of the
// output. Nothing here waits on a reader of the session.

// readLoop owns the master's read side and the mark scanner. It holds s.mu only to
// append a chunk and apply its marks, and never waits on a reader.
func (s *Session) readLoop() {
	defer s.wg.Done()
	var r chunkReader
	pr, err := ptyio.NewReader(s.master)
	for err == nil {
		var bp *[]byte
		var n int
		bp, n, err = pr.Read() // a pooled buffer, taken only when there is output
		if n > 0 {
			r.ingest(s, (*bp)[:n])
		}
		ptyio.Release(bp)
	}
	s.endRead(err)
}

// chunkReader is the read loop's state between chunks.
type chunkReader struct {
	marks  []mark
	offs   []int64
	kicked time.Time // when the poller was last told about output
	raw    int64     // a session in a holder: the holder's offset at the chunk's end
}

// ingest takes one chunk of output into the session.
func (r *chunkReader) ingest(s *Session, p []byte) {
	s.inflight.Store(true) // cleared under s.mu once ingested: see sample
	s.mu.Lock()
	r.marks, r.offs = r.marks[:0], r.offs[:0]
	s.scanner.scan(p, s.outputLocked, func(m mark) {
		s.flushRedactLocked() // a mark ends the redactor's stream: see redact.go
		r.marks = append(r.marks, m)
		r.offs = append(r.offs, s.ring.End())
	})
	if s.hold != nil {
		s.rawIn = r.raw
	}
	s.ingestLocked(r.marks, r.offs)
	s.armReleaseLocked()
	// Tell the poller about plain output at most once per minPoll: under a
	// flood, a wake-up per read cost 8% of the CPU of reading (it only backs
	// off). A chunk with marks always tells it: a C mark makes a typed
	// command running, and the poller, idle until then, must start watching
	// it (it may go quiet at once, reading input).
	s.inflight.Store(false)
	if now := time.Now(); len(r.marks) > 0 || now.Sub(r.kicked) >= minPoll {
		r.kicked = now
		s.kickPollerLocked(false)
	}
	s.mu.Unlock()
}

// endRead records the end of the output (err: why, nil when it ended normally).
func (s *Session) endRead(err error) {
	s.mu.Lock()
	s.scanner.flush(s.outputLocked)
	s.flushRedactLocked()
	s.readDone = true
	s.broadcastLocked()
	s.mu.Unlock()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) && !errors.Is(err, syscall.EIO) {
		s.log.Debug("pty read ended", "err", err)
	}
}

// ingestLocked applies the marks of one chunk (each at the offset where it occurred)
// and wakes waiters. The marks are applied after the whole chunk was appended, so a
// block that ends here covers exactly its bytes: offsets come from the scan.
func (s *Session) ingestLocked(marks []mark, offs []int64) {
	s.lastOutput = time.Now()
	if len(marks) == 0 {
		s.broadcastOutputLocked() // the state depends on marks and samples only
		return
	}
	for i, m := range marks {
		s.applyMarkLocked(m, offs[i])
	}
	s.updateStateLocked()
	s.broadcastLocked()
}
