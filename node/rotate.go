package node

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/replay"
)

// Defaults of the recording quota (Config.RecordingMaxBytes, Config.RecordingParts):
// a session keeps at most about 128 MiB of recording, its newest output.
const (
	DefaultRecordingMaxBytes = 64 << 20
	DefaultRecordingParts    = 2
)

// errDropped: the output asked for was in a part of the recording that rotation
// deleted (the read verb answers api.CodeGone).
var errDropped = fmt.Errorf("dropped by the recording quota")

// countWriter counts the bytes written through it: the size of the current part.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// partPath is the file of the rotated part that starts at output offset start.
func partPath(dir string, start int64) string {
	return filepath.Join(dir, "output."+strconv.FormatInt(start, 10)+".cast")
}

// openPartLocked creates output.cast as a new part starting at output offset
// e.partStart, with the header e.hdr (the recording's, at the current size).
// recMu is held (or the entry is not yet shared).
func (e *entry) openPartLocked() error {
	f, err := datadir.OpenFile(e.castTo, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	e.castF = f
	e.castCount = &countWriter{w: f}
	if e.cast, err = replay.NewWriter(e.castCount, e.hdr); err != nil { // buffered, in a buffer held only while events wait
		f.Close()
		return err
	}
	return nil
}

// partSizeLocked is the size of the current part, buffered bytes included.
func (e *entry) partSizeLocked() int64 {
	return e.castCount.n + int64(e.cast.Buffered())
}

// rotateLocked ends the current part when it has reached the cap: output.cast
// becomes output.<start>.cast, the oldest parts beyond Config.RecordingParts are
// deleted, and a new output.cast starts at the current output offset. It waits while
// the writer holds back an incomplete character, so that no character is split
// between parts (the next chunk completes it). recMu is held.
func (e *entry) rotateLocked() error {
	if e.partSizeLocked() < e.n.cfg.RecordingMaxBytes || e.cast.Pending() > 0 {
		return nil
	}
	if err := e.cast.Close(); err != nil {
		return err
	}
	if err := e.castF.Close(); err != nil {
		return err
	}
	if e.rec != nil {
		_ = e.rec.Close()
		e.rec = nil
	}
	end := e.partStart + e.cast.Offset()
	if err := os.Rename(e.castTo, partPath(e.dir, e.partStart)); err != nil {
		return err
	}
	e.parts = append(e.parts, e.partStart)
	for len(e.parts) > e.n.cfg.RecordingParts-1 {
		if err := os.Remove(partPath(e.dir, e.parts[0])); err != nil && !os.IsNotExist(err) {
			return err
		}
		e.parts = e.parts[1:]
	}
	e.partStart = end
	e.hdr.Offset = end
	e.hdr.Start = e.cast.Time() // the next part's intervals count from its last event
	e.n.kickJanitor()           // the node-wide cap may be reached
	return e.openPartLocked()
}

// heldFromLocked is the oldest output offset the recording still holds.
func (e *entry) heldFromLocked() int64 {
	if len(e.parts) > 0 {
		return e.parts[0]
	}
	return e.partStart
}

// readPartLocked reads [from, to) from the rotated part that holds offset from
// (to is cut at the part's end; the caller reads on from there).
func (e *entry) readPartLocked(from, to int64) ([]byte, error) {
	i := sort.Search(len(e.parts), func(i int) bool { return e.parts[i] > from }) - 1
	if i < 0 {
		return nil, errDropped
	}
	start, end := e.parts[i], e.partStart
	if i+1 < len(e.parts) {
		end = e.parts[i+1]
	}
	rec, err := replay.Open(partPath(e.dir, start))
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	return rec.ReadRange(from-start, min(to, end)-start)
}

// dropOldestPart deletes the session's oldest rotated part (for the node-wide cap)
// and returns its size; 0 when there is none (the current part is never dropped).
func (e *entry) dropOldestPart() int64 {
	e.recMu.Lock()
	defer e.recMu.Unlock()
	if len(e.parts) == 0 {
		return 0
	}
	p := partPath(e.dir, e.parts[0])
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	if err := os.Remove(p); err != nil {
		return 0
	}
	e.parts = e.parts[1:]
	return fi.Size()
}
