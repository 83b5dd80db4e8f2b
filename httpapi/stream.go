package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/fleetmux/fleetmux/api"
)

// output serves GET .../output: the raw bytes from ?from= to the end of the output
// as it stands when the request arrives (at most ?max_bytes= when given), or with
// ?follow=1 a stream that ends when the session exits.
func (s *Server) output(w http.ResponseWriter, r *http.Request) {
	node, id, err := target(r)
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	from, err := queryInt(r, "from")
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	if r.URL.Query().Has("max") { // its name before max_bytes: never ignore a limit
		s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "query max: the parameter is max_bytes"))
		return
	}
	maxBytes, err := queryInt(r, "max_bytes")
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	follow := false
	switch f := r.URL.Query().Get("follow"); f {
	case "", "0", "false":
	case "1", "true":
		follow = true
	default:
		s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "follow=%q: want 1 or 0", f))
		return
	}
	// The first read answers errors (unknown session, gone range) as JSON before any
	// byte of the stream is written.
	first, err := s.fleet.Output(r.Context(), node, id, from, readPage(maxBytes))
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(api.HeaderOffset, strconv.FormatInt(first.Offset, 10))
	h.Set(api.HeaderEnd, strconv.FormatInt(first.End, 10))
	h.Set(api.HeaderOldest, strconv.FormatInt(first.Oldest, 10))
	if !follow {
		s.outputRange(w, r, node, id, first, maxBytes)
		return
	}
	release, lerr := s.takeStream(r)
	if lerr != nil {
		s.reply(w, r, nil, lerr)
		return
	}
	defer release()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	out := &streamWriter{w: w, fl: fl, valid: s.stillValid(r)}
	if _, err := out.Write(first.Data); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.streamCtx, cancel)()
	s.reqWG.Add(1)
	defer s.reqWG.Done()
	_, _, err = s.fleet.Follow(ctx, node, id, first.Offset+int64(len(first.Data)), out)
	if err != nil && ctx.Err() == nil {
		// The body is a byte stream: an error can only end it. The client sees the
		// end, asks again from the offset it reached, and gets the error as JSON.
		// Aborting (no final chunk) tells a cut stream from a session's end.
		s.log.Debug("output stream ended", "node", node, "session", id, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// readPage is the Max of a read request for a range of at most maxBytes (0: no
// limit): the node's read size is a page of the reply, not its limit.
func readPage(maxBytes int64) int {
	if maxBytes <= 0 || maxBytes > api.MaxReadBytes {
		return api.MaxReadBytes
	}
	return int(maxBytes)
}

// outputRange writes the bytes [first.Offset, end) of a session's output, where end
// is the output's end in the first reply (when the request arrived), or fewer when
// maxBytes (> 0) is less. It pages through the node's read verb, one page in memory
// at a time. The length is known up front (Content-Length), so a range cut short (the
// node went down, the range left the scrollback and the recording) is a short body,
// never a silently shorter file.
func (s *Server) outputRange(w http.ResponseWriter, r *http.Request, node, id string, first api.ReadReply, maxBytes int64) {
	from, end := first.Offset, first.End
	if maxBytes > 0 {
		end = min(end, from+maxBytes)
	}
	end = max(end, from)
	w.Header().Set("Content-Length", strconv.FormatInt(end-from, 10))
	w.WriteHeader(http.StatusOK)
	next := from
	page := first
	for {
		if page.Offset != next || len(page.Data) == 0 && next < end {
			s.log.Warn("output read out of step; range cut short", "node", node, "session", id, "want", next, "got", page.Offset, "bytes", len(page.Data))
			panic(http.ErrAbortHandler)
		}
		data := page.Data[:min(int64(len(page.Data)), end-next)]
		if _, err := w.Write(data); err != nil {
			return // the client went away
		}
		next += int64(len(data))
		if next >= end {
			return
		}
		var err error
		if page, err = s.fleet.Output(r.Context(), node, id, next, readPage(end-next)); err != nil {
			// The status is sent: the short body is the client's sign.
			s.log.Debug("output range cut short", "node", node, "session", id, "offset", next, "err", err)
			panic(http.ErrAbortHandler)
		}
	}
}

// streamWriter is a follow stream's body: each write checks first that the
// stream's token is still accepted, and is flushed to the client at once.
type streamWriter struct {
	w     http.ResponseWriter
	fl    http.Flusher // nil: w cannot flush
	valid func() bool
}

func (sw *streamWriter) Write(p []byte) (int, error) {
	if !sw.valid() {
		return 0, errRevoked // the token was revoked or expired while the stream was open
	}
	n, err := sw.w.Write(p)
	if err != nil {
		return n, err
	}
	if sw.fl != nil {
		sw.fl.Flush()
	}
	return n, nil
}
