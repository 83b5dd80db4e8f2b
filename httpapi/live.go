package httpapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/fleetmux/fleetmux/api"
)

// The subprotocols of GET .../live, as asciinema-player (3.x) and asciinema server
// name them. v1.alis is preferred when a client offers both.
const (
	ProtoALiS = "v1.alis"
	ProtoV3   = "v3.asciicast"
)

// Live stream limits.
const (
	// liveMaxBehind bounds the bytes queued for one viewer: a viewer that falls
	// further behind is cut off (it reconnects from the current screen), so no viewer
	// holds more memory than this, and none ever slows the session.
	liveMaxBehind    = 4 << 20
	liveWriteTimeout = 30 * time.Second // a viewer that stops reading is let go after it
)

// Close reasons of a live stream (a client sees them in its close event).
const (
	reasonSlow    = "slow consumer: more than 4 MiB behind; reconnect to start again from the current screen"
	reasonBehind  = "slow consumer: fell behind the output the node keeps; reconnect to start again from the current screen"
	reasonExited  = "session exited"
	reasonRevoked = "token revoked or expired"
)

// errSlow: the viewer fell more than liveMaxBehind behind.
var errSlow = errors.New("slow consumer")

// live serves GET /v1/sessions/{node}/{id}/live: a read-only WebSocket for players,
// speaking the subprotocol the client offers of v1.alis (asciinema's binary live
// protocol) and v3.asciicast (an asciicast v3 header, then one event per text
// message). It starts from the current screen (ALiS: the reset frame's init;
// asciicast: the first "o" event), then the session's live output and resizes, and at the
// session's end its exit status ("x"; ALiS then sends EOT) and a normal close. A
// message from the client closes the stream (policy violation): it is read-only, and
// a viewer's token suffices. A viewer that falls liveMaxBehind behind is closed with
// 1013 (try again later) and reasonSlow; the session never waits for a viewer.
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	node, id, err := target(r)
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	sess, err := s.fleet.Session(r.Context(), node, id)
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "live is a WebSocket: send Upgrade: websocket"))
		return
	}
	var offered []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			offered = append(offered, strings.TrimSpace(p))
		}
	}
	if !slices.Contains(offered, ProtoALiS) && !slices.Contains(offered, ProtoV3) {
		s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "live speaks the WebSocket subprotocols %s and %s: offer one in Sec-WebSocket-Protocol", ProtoALiS, ProtoV3))
		return
	}
	release, lerr := s.takeStream(r)
	if lerr != nil {
		s.reply(w, r, nil, lerr)
		return
	}
	defer release()
	s.reqWG.Add(1) // a hijacked connection: http.Server.Shutdown does not wait for it
	defer s.reqWG.Done()
	// Accept checks the Origin too (its host must be the request's), as attach's.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ProtoALiS, ProtoV3}})
	if err != nil {
		return
	}
	s.liveConn(r.Context(), ws, s.stillValid(r), node, id, sess)
}

// liveConn streams the session to ws until it ends, the client goes, the server
// shuts down or the viewer falls too far behind. Frames go through a bounded queue
// that one goroutine (owned here, waited for) writes out.
func (s *Server) liveConn(rctx context.Context, ws *websocket.Conn, valid func() bool, node, id string, sess api.Session) {
	defer ws.CloseNow()
	ctx, cancel := context.WithCancel(rctx)
	defer cancel()
	defer context.AfterFunc(s.streamCtx, cancel)()
	ctx = ws.CloseRead(ctx) // read-only: the client's first message ends the stream

	q := newLiveQueue(liveMaxBehind)
	sent := make(chan error, 1)
	go func() {
		sent <- q.drain(func(f frame) error {
			wctx, wcancel := context.WithTimeout(ctx, liveWriteTimeout)
			defer wcancel()
			return ws.Write(wctx, f.typ, f.data)
		})
	}()
	enc := newLiveEncoder(ws.Subprotocol(), time.Now())

	// Block markers: the blocks that start from now on, placed at their first
	// byte as the recording places them. Subscribed before the redraw, so none
	// that starts after the screen is missed.
	out := &liveWriter{enc: enc, q: q, valid: valid, off: -1, wake: make(chan struct{}, 1)}
	stopBlocks, err := s.fleet.WatchBlocks(node, id, func(ev api.BlockEvent) {
		if ev.Type == api.BlockStarted {
			out.marker(ev.Block.N, ev.Block.Start, ev.Block.Command)
		}
	})
	if err != nil {
		s.log.Debug("live stream without block markers", "node", node, "session", id, "err", err)
		stopBlocks = func() {}
	}
	defer stopBlocks()
	var screen bytes.Buffer
	start, err := s.fleet.Redraw(ctx, node, id, &screen)
	var exitCode *int
	var exited bool
	if err == nil {
		out.mu.Lock()
		err = q.push(enc.start(sess.Cols, sess.Rows, screen.Bytes())...)
		out.off, out.start = start, start
		err = errors.Join(err, out.flushLate())
		out.mu.Unlock()
	}
	if err == nil {
		// Resizes: the session's size, looked at every liveResizeEvery while the
		// stream runs (output is the stream's clock; a resize is rare).
		// And the output held back for the markers (liveHold), queued once old
		// enough when no more comes. A failure there ends the follow.
		fctx, stopFollow := context.WithCancel(ctx)
		var polling sync.WaitGroup
		polling.Add(2)
		go func() {
			defer polling.Done()
			s.pollSize(fctx, node, id, sess.Cols, sess.Rows, out)
		}()
		var releaseErr error
		go func() {
			defer polling.Done()
			if releaseErr = out.releaseLoop(fctx); releaseErr != nil {
				stopFollow()
			}
		}()
		exitCode, exited, err = s.fleet.Follow(fctx, node, id, start, out)
		stopFollow()
		polling.Wait()
		if releaseErr != nil && ctx.Err() == nil {
			err = releaseErr
		}
	}
	if err == nil {
		// What is held goes now (all of it), then the end.
		out.mu.Lock()
		err = out.release(time.Time{})
		out.mu.Unlock()
	}
	if err == nil && exited {
		err = out.push(enc.exit(exitCode))
	}
	// Let the writer send what is queued (all of it at the session's end), or drop
	// it (a slow viewer, an error: only the close frame matters then).
	if err != nil {
		q.abort()
	}
	q.finish()
	werr := <-sent
	switch {
	case ctx.Err() != nil || werr != nil:
		// The client went away, the server shuts down, or a write failed or timed
		// out (a viewer that stopped reading): no close handshake to wait for.
	default:
		if err != nil {
			s.log.Debug("live stream ended", "node", node, "session", id, "err", err)
		}
		ws.Close(liveClose(err))
	}
}

// liveClose is the close frame of a live stream that ended with err (nil: the
// session exited). A follow that lost output the node no longer keeps (gone: a
// flood outran the stream's NATS subscription and the scrollback) fell behind
// as a slow viewer does, and is told to reconnect the same way.
func liveClose(err error) (websocket.StatusCode, string) {
	switch {
	case err == nil:
		return websocket.StatusNormalClosure, reasonExited
	case errors.Is(err, errSlow):
		return websocket.StatusTryAgainLater, reasonSlow
	case errors.Is(err, &api.Error{Code: api.CodeGone}):
		return websocket.StatusTryAgainLater, reasonBehind
	case errors.Is(err, errRevoked):
		return websocket.StatusPolicyViolation, reasonRevoked
	}
	return websocket.StatusInternalError, closeReason(err)
}

// closeReason is err's message cut to fit a close frame (123 bytes), at a character.
func closeReason(err error) string {
	msg := err.Error()
	var ae *api.Error
	if errors.As(err, &ae) {
		msg = ae.Code + ": " + ae.Message
	}
	if len(msg) <= 123 {
		return msg
	}
	n := 123
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n]
}

// liveResizeEvery is how often a live stream looks at the session's size.
const liveResizeEvery = time.Second

// pollSize pushes a resize event whenever the session's size is no longer cols×rows,
// until ctx ends.
func (s *Server) pollSize(ctx context.Context, node, id string, cols, rows int, out *liveWriter) {
	t := time.NewTicker(liveResizeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sess, err := s.fleet.Session(ctx, node, id)
		if err != nil || sess.Cols < 1 || sess.Rows < 1 || sess.Cols == cols && sess.Rows == rows {
			continue
		}
		cols, rows = sess.Cols, sess.Rows
		out.mu.Lock()
		err = out.release(time.Time{}) // the output before the resize first
		if err == nil {
			err = out.q.push(out.enc.resize(cols, rows)...)
		}
		out.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// liveWriter turns the session's output into frames on the queue. Its mutex orders
// the encoder's use (output, resizes, markers) with the frames' order on the queue.
//
// A block's marker goes right before the block's first byte, as in the recording;
// but the node tells of a block's start (the block subject) a little after the
// block's first output (the output subject). So output is held back liveHold
// before it is queued, and a marker that comes in time takes its place in it; one
// that comes later still goes at once.
type liveWriter struct {
	mu    sync.Mutex
	enc   *liveEncoder
	q     *liveQueue
	valid func() bool
	// off is the output offset after the last byte Write got (-1 until the
	// stream has its start), start the stream's first.
	off, start int64
	// held is the output not queued yet (the heldBytes before off), with when
	// each piece came.
	held      []heldOutput
	heldBytes int
	wake      chan struct{} // output is held: releaseLoop has work
	// marks are the markers of blocks that start at or after the output queued,
	// by offset; lastN the last block number taken (each block gets one marker).
	marks []liveMark
	lastN int
}

// liveHold is how long output waits for the marker of a block starting in it.
const liveHold = 50 * time.Millisecond

// heldOutput is output waiting to be queued.
type heldOutput struct {
	data []byte
	came time.Time
}

// liveMark is a block's marker waiting for the block's first byte.
type liveMark struct {
	at    int64
	label string
}

// liveMaxMarks bounds the markers waiting for their output.
const liveMaxMarks = 64

func (lw *liveWriter) Write(p []byte) (int, error) {
	if !lw.valid() {
		return 0, errRevoked
	}
	now := time.Now()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.held = append(lw.held, heldOutput{data: bytes.Clone(p), came: now})
	lw.heldBytes += len(p)
	lw.off += int64(len(p))
	if lw.heldBytes > lw.q.max { // held counts as queued: a viewer never holds more
		return 0, errSlow
	}
	if err := lw.release(now.Add(-liveHold)); err != nil {
		return 0, err
	}
	select {
	case lw.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// release queues the held output that came before (all of it when before is
// zero), each marker right before its block's first byte. lw.mu is held.
func (lw *liveWriter) release(before time.Time) error {
	sent := lw.off - int64(lw.heldBytes)
	for len(lw.held) > 0 && (before.IsZero() || !lw.held[0].came.After(before)) {
		p := lw.held[0].data
		lw.held[0] = heldOutput{}
		lw.held = lw.held[1:]
		lw.heldBytes -= len(p)
		for len(lw.marks) > 0 && lw.marks[0].at < sent+int64(len(p)) {
			k := max(lw.marks[0].at-sent, 0)
			if err := lw.q.push(lw.enc.output(p[:k])...); err != nil {
				return err
			}
			p, sent = p[k:], sent+k
			if err := lw.q.push(lw.enc.marker(lw.marks[0].label)); err != nil {
				return err
			}
			lw.marks = lw.marks[1:]
		}
		if err := lw.q.push(lw.enc.output(p)...); err != nil {
			return err
		}
		sent += int64(len(p))
	}
	if len(lw.held) == 0 {
		lw.held = nil
	}
	return nil
}

// releaseLoop queues held output once it is liveHold old, when no Write comes to
// do it, until ctx ends or queueing fails.
func (lw *liveWriter) releaseLoop(ctx context.Context) error {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-lw.wake:
		}
		for {
			lw.mu.Lock()
			if len(lw.held) == 0 {
				lw.mu.Unlock()
				break
			}
			due := lw.held[0].came.Add(liveHold)
			var err error
			if !time.Now().Before(due) {
				err = lw.release(time.Now().Add(-liveHold))
			}
			lw.mu.Unlock()
			if err != nil {
				return err
			}
			t.Reset(time.Until(due))
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}
}

// push queues frames made apart from Write (the exit).
func (lw *liveWriter) push(fs []frame) error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.q.push(fs...)
}

// marker places the marker of block n, which starts at output offset at, before
// the block's first byte: when the output gets there, or at once when the output
// there is queued already (the news came late). Blocks that started before the
// stream get none (its screen shows them); each block gets one.
func (lw *liveWriter) marker(n int, at int64, command string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if n <= lw.lastN || len(lw.marks) >= liveMaxMarks {
		return
	}
	lw.lastN = n
	m := liveMark{at: at, label: markerLabel(n, command)}
	i := len(lw.marks)
	for i > 0 && lw.marks[i-1].at > at {
		i--
	}
	lw.marks = slices.Insert(lw.marks, i, m)
	if lw.off >= 0 {
		_ = lw.flushLate() // a full queue fails the next Write too
	}
}

// flushLate queues the markers of blocks whose first byte is queued already: those
// of blocks that started before the stream are dropped, the others go now. lw.mu
// is held.
func (lw *liveWriter) flushLate() error {
	sent := lw.off - int64(lw.heldBytes)
	for len(lw.marks) > 0 && lw.marks[0].at < sent {
		m := lw.marks[0]
		lw.marks = lw.marks[1:]
		if m.at < lw.start {
			continue
		}
		if err := lw.q.push(lw.enc.marker(m.label)); err != nil {
			return err
		}
	}
	return nil
}

// markerLabel is a block's marker label as the recording writes it ("block N:
// COMMAND", replay.BlockLabel), the command cut at 200 bytes and its control
// characters shown as spaces.
func markerLabel(n int, command string) string {
	if len(command) > 200 {
		k := 200
		for k > 0 && !utf8.RuneStart(command[k]) {
			k--
		}
		command = command[:k] + "…"
	}
	command = strings.Map(func(r rune) rune {
		if r < 0x20 || r >= 0x7f && r < 0xa0 {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(command, "\ufffd"))
	return "block " + strconv.Itoa(n) + ": " + command
}

// liveQueue holds the frames waiting for a viewer, at most max bytes of them.
type liveQueue struct {
	mu      sync.Mutex
	frames  []frame
	bytes   int
	max     int
	done    bool // finish was called: drain returns once the queue is empty
	dropped bool // abort was called: what is queued is dropped
	wake    chan struct{}
}

func newLiveQueue(max int) *liveQueue {
	return &liveQueue{max: max, wake: make(chan struct{}, 1)}
}

// push queues frames; errSlow when they would take the queue past its bound (then
// nothing more is queued).
func (q *liveQueue) push(fs ...frame) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped {
		return errSlow
	}
	for _, f := range fs {
		q.bytes += len(f.data)
		q.frames = append(q.frames, f)
	}
	if q.bytes > q.max {
		q.frames, q.bytes, q.dropped = nil, 0, true
		return errSlow
	}
	q.signal()
	return nil
}

func (q *liveQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// finish says no more frames come: drain returns once it wrote what is queued.
func (q *liveQueue) finish() {
	q.mu.Lock()
	q.done = true
	q.signal()
	q.mu.Unlock()
}

// abort drops what is queued.
func (q *liveQueue) abort() {
	q.mu.Lock()
	q.frames, q.bytes, q.dropped = nil, 0, true
	q.mu.Unlock()
}

// drain writes the queued frames with write, in order, until finish (and the queue is
// empty) or write fails.
func (q *liveQueue) drain(write func(frame) error) error {
	for {
		q.mu.Lock()
		if len(q.frames) == 0 {
			done := q.done
			q.mu.Unlock()
			if done {
				return nil
			}
			<-q.wake
			continue
		}
		f := q.frames[0]
		q.frames[0] = frame{}
		q.frames = q.frames[1:]
		q.bytes -= len(f.data)
		q.mu.Unlock()
		if err := write(f); err != nil {
			q.abort()
			return err
		}
	}
}

// liveEncoder makes the frames of one live stream in its protocol. Output is cut
// only between UTF-8 characters (players decode each message on its own).
type liveEncoder struct {
	alis  bool
	t0    time.Time
	last  time.Duration // time of the last event
	id    uint64        // ALiS: the last event's id
	held  []byte        // an incomplete character at the end of the last output
	buf   []byte
	jsonB bytes.Buffer
}

func newLiveEncoder(proto string, t0 time.Time) *liveEncoder {
	return &liveEncoder{alis: proto == ProtoALiS, t0: t0}
}

// tick moves the stream's clock to now and returns the interval since the last event.
func (e *liveEncoder) tick() (rel time.Duration) {
	now := max(time.Since(e.t0), e.last)
	rel, e.last = now-e.last, now
	return rel
}

// start is the stream's first frames: the terminal's size and its current screen.
func (e *liveEncoder) start(cols, rows int, screen []byte) []frame {
	cols, rows = max(cols, 1), max(rows, 1)
	screen = e.whole(screen)
	if e.alis {
		b := append([]byte(nil), 0x01)
		b = binary.AppendUvarint(b, 0) // last event id
		b = binary.AppendUvarint(b, 0) // time (µs)
		b = binary.AppendUvarint(b, uint64(cols))
		b = binary.AppendUvarint(b, uint64(rows))
		b = append(b, 0) // no theme
		b = binary.AppendUvarint(b, uint64(len(screen)))
		b = append(b, screen...)
		return []frame{{typ: websocket.MessageBinary, data: []byte("ALiS\x01")}, {typ: websocket.MessageBinary, data: b}}
	}
	hdr, _ := json.Marshal(map[string]any{"version": 3, "term": map[string]any{"cols": cols, "rows": rows, "type": "xterm-256color"},
		"timestamp": e.t0.Unix()})
	out := []frame{{typ: websocket.MessageText, data: hdr}}
	if len(screen) > 0 {
		out = append(out, e.event(0, "o", screen))
	}
	return out
}

// output is the frames of a piece of the session's output (none while it holds only
// part of a character).
func (e *liveEncoder) output(p []byte) []frame {
	if p = e.whole(p); len(p) == 0 {
		return nil
	}
	return e.encodeOutput(p)
}

// encodeOutput is the frame of output p, as it is.
func (e *liveEncoder) encodeOutput(p []byte) []frame {
	rel := e.tick()
	if e.alis {
		e.id++
		b := append(e.buf[:0], 'o')
		b = binary.AppendUvarint(b, e.id)
		b = binary.AppendUvarint(b, uint64(rel.Microseconds()))
		b = binary.AppendUvarint(b, uint64(len(p)))
		e.buf = append(b, p...)
		return []frame{{typ: websocket.MessageBinary, data: bytes.Clone(e.buf)}}
	}
	return []frame{e.event(rel, "o", p)}
}

// resize is the frame of a resize to cols×rows.
func (e *liveEncoder) resize(cols, rows int) []frame {
	rel := e.tick()
	if e.alis {
		e.id++
		b := append([]byte(nil), 'r')
		b = binary.AppendUvarint(b, e.id)
		b = binary.AppendUvarint(b, uint64(rel.Microseconds()))
		b = binary.AppendUvarint(b, uint64(cols))
		b = binary.AppendUvarint(b, uint64(rows))
		return []frame{{typ: websocket.MessageBinary, data: b}}
	}
	return []frame{e.event(rel, "r", []byte(strconv.Itoa(cols)+"x"+strconv.Itoa(rows)))}
}

// marker is the frame of a marker with label (the output held back, an incomplete
// character, stays held: it belongs to the output after the marker's block start
// only when the block starts inside it, which a character cannot).
func (e *liveEncoder) marker(label string) frame {
	rel := e.tick()
	if e.alis {
		e.id++
		b := append([]byte(nil), 'm')
		b = binary.AppendUvarint(b, e.id)
		b = binary.AppendUvarint(b, uint64(rel.Microseconds()))
		b = binary.AppendUvarint(b, uint64(len(label)))
		b = append(b, label...)
		return frame{typ: websocket.MessageBinary, data: b}
	}
	return e.event(rel, "m", []byte(label))
}

// exit is the frames of the session's end: the output held back (an incomplete
// character the session never completed), its exit status (when known), and for
// ALiS the end of transmission.
func (e *liveEncoder) exit(code *int) []frame {
	var out []frame
	if len(e.held) > 0 {
		out = append(out, e.encodeOutput(e.held)...)
		e.held = nil
	}
	if code != nil {
		rel := e.tick()
		status := max(*code, 0)
		if e.alis {
			e.id++
			b := append([]byte(nil), 'x')
			b = binary.AppendUvarint(b, e.id)
			b = binary.AppendUvarint(b, uint64(rel.Microseconds()))
			b = binary.AppendUvarint(b, uint64(status))
			out = append(out, frame{typ: websocket.MessageBinary, data: b})
		} else {
			out = append(out, e.event(rel, "x", []byte(strconv.Itoa(status))))
		}
	}
	if e.alis {
		out = append(out, frame{typ: websocket.MessageBinary, data: []byte{0x04}})
	}
	return out
}

// whole returns held bytes and p up to its last whole character, holding back an
// incomplete one at the end (at most 3 bytes) for the next call.
func (e *liveEncoder) whole(p []byte) []byte {
	if len(e.held) > 0 {
		p = append(e.held, p...)
		e.held = nil
	}
	for k := 1; k <= min(utf8.UTFMax-1, len(p)); k++ {
		if c := p[len(p)-k]; utf8.RuneStart(c) {
			if c >= utf8.RuneSelf && !utf8.FullRune(p[len(p)-k:]) {
				e.held = bytes.Clone(p[len(p)-k:])
				p = p[:len(p)-k]
			}
			break
		}
	}
	return p
}

// event is an asciicast v3 event as a text message: [interval, code, data]. JSON
// holds only valid UTF-8: other bytes become U+FFFD, as any player shows them.
func (e *liveEncoder) event(rel time.Duration, code string, data []byte) frame {
	e.jsonB.Reset()
	e.jsonB.WriteByte('[')
	e.jsonB.WriteString(strconv.FormatFloat(rel.Seconds(), 'f', 6, 64))
	e.jsonB.WriteString(`, "`)
	e.jsonB.WriteString(code)
	e.jsonB.WriteString(`", `)
	enc := json.NewEncoder(&e.jsonB)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(string(data)) // a string always encodes; Encode adds a newline
	e.jsonB.Truncate(e.jsonB.Len() - 1)
	e.jsonB.WriteByte(']')
	return frame{typ: websocket.MessageText, data: bytes.Clone(e.jsonB.Bytes())}
}
