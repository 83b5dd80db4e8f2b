package keeper

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/fleetmux/fleetmux/internal/datadir"
)

// A stream on disk is a numbered series of chunk files NAME.N in the exec's
// directory (stdout.0, stdout.1, …), each Meta.Chunk bytes but the last. Chunk 0
// (the head) is kept for good; past it only the newest two chunks are kept (the
// tail): the keeper removes chunk N-2 when it starts chunk N (N >= 3). There is
// no state file: the stream's length is last*chunk plus the size of the last
// chunk, and the oldest offset past the head still held follows from the chunks
// kept, whenever the keeper stopped.

// chunkWriter writes one stream as chunk files. Not safe for concurrent use
// (proc writes each stream from one goroutine).
type chunkWriter struct {
	dir, name string
	chunk     int64
	n         int64    // bytes written
	f         *os.File // the chunk being written; nil: none open
	err       error    // the first error; later writes are dropped
	logf      func(format string, args ...any)
}

func chunkPath(dir, name string, i int64) string {
	return filepath.Join(dir, name+"."+strconv.FormatInt(i, 10))
}

// Write writes p to the stream's chunks; it never fails (a stream that cannot
// be written, a full disk, is logged once and loses the rest).
func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && w.err == nil {
		i := w.n / w.chunk
		if w.f == nil {
			f, err := datadir.OpenFile(chunkPath(w.dir, w.name, i), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				w.fail(err)
				break
			}
			w.f = f
			if i >= 3 {
				_ = os.Remove(chunkPath(w.dir, w.name, i-2))
			}
		}
		k := min(int64(len(p)), w.chunk-w.n%w.chunk)
		m, err := w.f.Write(p[:k])
		w.n += int64(m)
		if err != nil {
			w.fail(err)
			break
		}
		p = p[k:]
		if w.n%w.chunk == 0 {
			w.close()
		}
	}
	return n, nil
}

func (w *chunkWriter) fail(err error) {
	w.err = err
	w.close()
	if w.logf != nil {
		w.logf("stream %s: %v: the rest of it is lost", w.name, err)
	}
}

// close closes the chunk being written.
func (w *chunkWriter) close() {
	if w.f != nil {
		if err := w.f.Close(); err != nil && w.err == nil {
			w.err = err
		}
		w.f = nil
	}
}

// stream is one stream's chunks on disk as listed at one moment.
type stream struct {
	dir, name string
	chunk     int64
	end       int64 // the stream's length
	oldest    int64 // the first offset past the head still held (0: nothing dropped)
}

// maxChunks bounds the chunk files of a stream a listing accepts.
const maxChunks = 16

// openStream lists stream name's chunks in dir.
func openStream(dir, name string, chunk int64) (stream, error) {
	s := stream{dir: dir, name: name, chunk: chunk}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return s, err
	}
	var idx []int64
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), name+".")
		if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
			continue
		}
		i, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || i < 0 || i > 1<<40 || !e.Type().IsRegular() {
			continue
		}
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return s, nil
	}
	if len(idx) > maxChunks {
		return s, fmt.Errorf("stream %s: %d chunk files", name, len(idx))
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	last := idx[len(idx)-1]
	st, err := os.Lstat(chunkPath(dir, name, last))
	if err != nil {
		return s, err
	}
	s.end = last*chunk + min(st.Size(), chunk)
	first := last // the first of the run of chunks that ends with the last
	for k := len(idx) - 2; k >= 0 && idx[k] == first-1 && idx[k] >= 1; k-- {
		first = idx[k]
	}
	if first > 1 {
		s.oldest = first * chunk
	}
	return s, nil
}

// errGone: a chunk was removed between the listing and the read.
var errGone = errors.New("chunk removed")

// read returns the bytes [from, to) of the stream (all in chunks it holds).
func (s stream) read(from, to int64) ([]byte, error) {
	out := make([]byte, 0, max(to-from, 0))
	for from < to {
		i := from / s.chunk
		k := min(to, (i+1)*s.chunk) - from
		f, err := datadir.OpenFile(chunkPath(s.dir, s.name, i), os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return out, errGone
		}
		if err != nil {
			return out, err
		}
		buf := make([]byte, k)
		m, err := f.ReadAt(buf, from%s.chunk)
		f.Close()
		out = append(out, buf[:m]...)
		if int64(m) < k {
			if err == nil {
				err = errGone
			}
			return out, fmt.Errorf("stream %s: %w", s.name, err)
		}
		from += k
	}
	return out, nil
}

// readAt is capture.ReadAt over the chunks: up to limit bytes from offset from,
// from the head while from is in it, otherwise from the tail; bytes no longer
// held are skipped (off says where data starts).
func (s stream) readAt(from int64, limit int) (data []byte, off int64, err error) {
	from = min(max(from, 0), s.end)
	head := min(s.chunk, s.end)
	if from < head {
		data, err = s.read(from, min(head, from+int64(limit)))
		return data, from, err
	}
	from = max(from, s.oldest)
	data, err = s.read(from, min(s.end, from+int64(limit)))
	return data, from, err
}

// cut is capture.Cut over the chunks: the whole stream when it fits budget,
// otherwise its first half-budget bytes and its last bytes around a marker
// line, and how many bytes were left out.
func (s stream) cut(budget int) (text []byte, omitted int64, err error) {
	n := s.end
	if n <= int64(budget) && s.oldest == 0 {
		text, err = s.read(0, n)
		return text, 0, err
	}
	h := min(int64(budget/2), min(s.chunk, n))
	tailFrom := max(n-(int64(budget)-h), s.oldest, h)
	out, err := s.read(0, h)
	if err != nil {
		return nil, 0, err
	}
	omitted = tailFrom - h
	out = append(out, "\n[… "+strconv.FormatInt(omitted, 10)+" bytes omitted …]\n"...)
	tail, err := s.read(tailFrom, n)
	return append(out, tail...), omitted, err
}
