package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/replay"
)

// maxHeaderRead bounds the header line of a part the recording verb reads.
const maxHeaderRead = 64 << 10

// recording serves the recording verb: a piece of a session's recording (live, or
// closed while its directory is kept), re-encoded in the asked format. The caller
// strings the pieces together: see api.RecordingRequest.
func (n *Node) recording(ctx context.Context, req request) (any, error) {
	var r api.RecordingRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	if err := api.ValidName(r.Session); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "session id: %v", err)
	}
	switch {
	case r.Format != 0 && r.Format != api.RecordingV3 && r.Format != api.RecordingV2:
		return nil, api.Errorf(api.CodeBadRequest, "format %d: want 3 or 2", r.Format)
	case r.From < 0 || r.End < 0 || r.TUS < 0 || r.Max < 0 || r.Part < -1:
		return nil, api.Errorf(api.CodeBadRequest, "part, from, end, t_us and max must not be negative")
	}
	if r.Max == 0 || r.Max > api.MaxReadBytes {
		r.Max = api.MaxReadBytes
	}
	dir := filepath.Join(n.cfg.DataDir, "sessions", r.Session)
	n.mu.Lock()
	e := n.sessions[r.Session]
	n.mu.Unlock()
	if e != nil {
		// A live session: its parts do not change while recMu is held, and what the
		// writer buffers is flushed first (whole lines on disk).
		e.recMu.Lock()
		defer e.recMu.Unlock()
		if e.cast != nil {
			if err := e.flushLocked(); err != nil {
				return nil, api.Errorf(api.CodeUnavailable, "recording of %s/%s: %v", n.cfg.Name, r.Session, err)
			}
		}
	}
	parts, current, err := listParts(dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(parts) == 0 {
		return nil, api.Errorf(api.CodeNotFound, "no recording of %s/%s", n.cfg.Name, r.Session)
	}
	if err != nil {
		return nil, err
	}
	if r.Part == -1 {
		r.Part = parts[0]
	}
	i := sort.Search(len(parts), func(i int) bool { return parts[i] >= r.Part })
	if i == len(parts) || parts[i] != r.Part {
		return nil, api.Errorf(api.CodeGone, "part %d of the recording of %s/%s is no longer kept (the recording quota dropped it)", r.Part, n.cfg.Name, r.Session)
	}
	path := partPath(dir, r.Part)
	if i == len(parts)-1 && current {
		path = filepath.Join(dir, "output.cast")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, api.Errorf(api.CodeGone, "part %d of the recording of %s/%s: %v", r.Part, n.cfg.Name, r.Session, err)
	}
	defer f.Close()
	h, hl, err := readPartHeader(f)
	if err != nil {
		return nil, err
	}
	if r.End == 0 {
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		r.End = fi.Size()
	}
	first := r.From == 0
	if first {
		r.From = hl
	}
	tc := replay.Transcoder{Version: r.Format, T: time.Duration(r.TUS) * time.Microsecond}
	if idx, err := replay.OpenIndex(filepath.Join(dir, "output.cast")); err == nil {
		tc.Label = replay.IndexLabel(idx)
	}
	var out []byte
	if r.Header {
		hh := h
		hh.Version = 0
		if out, err = tc.Header(nil, hh); err != nil {
			return nil, err
		}
	}
	var used int
	var buf []byte
	for size := r.Max; ; size = api.MaxReadBytes {
		// Max is a wish: a piece holds at least one whole event (a line is at most a
		// few hundred KiB, under MaxReadBytes).
		buf = make([]byte, max(0, min(int64(size), r.End-r.From)))
		k, err := f.ReadAt(buf, r.From)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		buf = buf[:k]
		var lines []byte
		lines, used, err = tc.Lines(out, buf, h, first)
		if err != nil {
			return nil, api.Errorf(api.CodeInternal, "recording of %s/%s: part %d at %d: %v", n.cfg.Name, r.Session, r.Part, r.From+int64(used), err)
		}
		if used > 0 || len(buf) == 0 || size == api.MaxReadBytes || int64(len(buf)) == r.End-r.From {
			out = lines
			break
		}
	}
	next := r.From + int64(used)
	if used == 0 && len(buf) > 0 {
		if int64(len(buf)) < r.End-r.From {
			return nil, api.Errorf(api.CodeTooLarge, "recording of %s/%s: a line at %d of part %d is longer than %d bytes", n.cfg.Name, r.Session, r.From, r.Part, api.MaxReadBytes)
		}
		next = r.End // the part ends with a line cut short (a crash): left out
	}
	if out == nil {
		out = []byte{}
	}
	return api.RecordingReply{Parts: parts, Part: r.Part, Data: out, Next: next, End: r.End, TUS: tc.T.Microseconds()}, nil
}

// listParts lists the parts of the recording in dir by their start offsets, oldest
// first: the rotated ones (output.<start>.cast), then the current one (output.cast,
// current true) whose start is in its header.
func listParts(dir string) (parts []int64, current bool, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, err
	}
	for _, de := range ents {
		v, ok := strings.CutPrefix(de.Name(), "output.")
		if !ok {
			continue
		}
		if v, ok := strings.CutSuffix(v, ".cast"); ok {
			if off, err := strconv.ParseInt(v, 10, 64); err == nil && off >= 0 {
				parts = append(parts, off)
			}
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	if f, err := os.Open(filepath.Join(dir, "output.cast")); err == nil {
		h, _, herr := readPartHeader(f)
		f.Close()
		if herr == nil && (len(parts) == 0 || h.Offset > parts[len(parts)-1]) {
			parts, current = append(parts, h.Offset), true
		}
	}
	return parts, current, nil
}

// readPartHeader reads the header line of a part and its length (newline included).
func readPartHeader(f *os.File) (replay.Header, int64, error) {
	buf := make([]byte, 4<<10)
	for {
		k, err := f.ReadAt(buf, 0)
		if i := bytes.IndexByte(buf[:k], '\n'); i >= 0 {
			h, err := replay.ParseHeader(buf[:i])
			if err != nil {
				return h, 0, api.Errorf(api.CodeInternal, "recording %s: %v", filepath.Base(f.Name()), err)
			}
			return h, int64(i + 1), nil
		}
		if err != nil || len(buf) >= maxHeaderRead {
			return replay.Header{}, 0, api.Errorf(api.CodeInternal, "recording %s: no header line", filepath.Base(f.Name()))
		}
		buf = make([]byte, 2*len(buf))
	}
}
