package node

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/internal/delay"
	"github.com/fleetmux/fleetmux/policy"
	"github.com/fleetmux/fleetmux/replay"
	"github.com/fleetmux/fleetmux/session"
)

// publishLinger batches the output chunks of a command that a run request is waiting
// for (its echo, output, end and next prompt) into fewer messages, so the
// reply goes out first: within publishLinger of the last publication, more output
// waits for the rest of that span (session.ViewerOptions.Linger). recordLinger does
// the same for the recording, which no one follows live. The publisher, the recorder
// and the event pump are the session's followers (session.Config.Notify): while
// a run waits, even the first change after a quiet spell reaches them
// session.FollowDelay late, so the reply is not queued behind their work. Nothing
// waits when no run is waiting (keystrokes into an attached terminal).
const (
	publishLinger = 2 * time.Millisecond
	recordLinger  = 10 * time.Millisecond
)

// drainGrace bounds how long closing an entry waits for its output to be published
// and recorded before it cancels what is left.
const drainGrace = 5 * time.Second

// entry is one session of the node with its three followers, each a drain (drain.go)
// that the session's changes kick (session.Config.Notify, entry.kick): a goroutine
// runs while there is work and ends once caught up, so an idle session has none.
//
//   - the publisher: a viewer of the output that publishes it in chunks with their
//     offsets. It skips ahead rather than ever slowing the session; what it skipped
//     (or what the bus dropped while disconnected) is read back with the read verb.
//   - the recorder: a viewer that appends the output to the asciicast recording. It
//     may lag up to the whole scrollback; disk is faster than any terminal.
//   - the event pump: turns session events into block and session events on the bus,
//     resize events and block markers in the recording, and block index entries.
//
// Each runs on its own, so a slow bus never holds up the recording nor a slow disk
// the publication, and neither ever holds up the session.
type entry struct {
	n       *Node
	id      string
	num     int
	s       sessionHandle
	dir     string // recording directory
	castTo  string // path of the .cast file
	started time.Time
	owner   string       // the principal that created the session (reap.go); set before it is registered
	reapAt  atomic.Int64 // when the reaper closes the exited session (unix ns; 0: not set)

	ctx    context.Context // cancelled by close: the publisher and the recorder stop
	cancel context.CancelFunc

	// The followers (follow sets them up; ready once it has, before that a kick is
	// dropped: run catches up). Each field below a drain is its do's own.
	setup    sync.Once
	ready    atomic.Bool
	pub      drain
	pubView  *session.Viewer
	pubFail  bool // the last Publish failed (logged once per spell)
	recd     drain
	recView  *session.Viewer
	recEnded bool // the recording stopped (EOF or an error)
	nextMark int  // the next block whose marker the recording needs (recordLocked)
	ev       drain
	evSeq    uint64 // the last event handled

	recMu     sync.Mutex // guards the fields from cast to recErr
	cast      *replay.Writer
	castCount *countWriter // under cast: the bytes the current part holds on disk
	castF     *os.File
	hdr       replay.Header // of every part: the current size, the session's start
	partStart int64         // output offset the current part (output.cast) starts at
	parts     []int64       // start offsets of the rotated parts kept, oldest first
	index     *replay.IndexWriter
	indexF    *os.File
	rec       *replay.Recording // opened lazily to serve reads older than the scrollback
	recErr    error             // the recording stopped being exact (see recorder)
	// recTo is the end offset of the output recorded so far; exitPending is the
	// exit status waiting for the output before it to be recorded (the exit is
	// the recording's last event: see writeExitLocked).
	recTo       int64
	exitPending *int

	// guard is the session's guardrail state: writer lease, typed lines, password
	// prompts (package guard; the entry is its Target and Prompt: guard.go).
	guard *guard.Session
	// redactFor is the policy whose redactor the session has (redact.go); guarded
	// by n.redaction.mu.
	redactFor *policy.Policy

	// A reattached session (held.go): the replay's events up to replayed were
	// published by the previous agent, except the ends of blocks not in indexed;
	// recording goes on from resumeFrom, publishing from publishFrom.
	replayed    uint64
	indexed     map[int]bool
	resumeFrom  int64
	publishFrom int64
	// pubMark, for a session in a holder, keeps the end of the output published so
	// far (held.go), for the next agent; nil otherwise. Only the publisher uses it.
	pubMark *os.File

	closeOnce sync.Once
}

func (e *entry) info() api.Session { return e.wire(e.s.Info()) }

// wire is in, a snapshot of e's session, as the API shows it: with what the node
// keeps of it (owner, reap time).
func (e *entry) wire(in session.Info) api.Session {
	s := toSession(e.n.cfg.Name, e.id, in)
	s.Owner = e.owner
	if d, ok := e.n.agents.Driver(e.id); ok {
		s.Agent = d.Name
	}
	if at := e.reapTime(); !at.IsZero() {
		s.ReapAt = &at
	}
	return s
}

// startRecording creates the recording files of a new session.
func (e *entry) startRecording(h replay.Header) error {
	if err := datadir.Mkdir(e.dir); err != nil {
		return err
	}
	idx, err := datadir.OpenFile(filepath.Join(e.dir, "output.blocks.jsonl"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	e.hdr = h
	if err := e.openPartLocked(); err != nil {
		idx.Close()
		return err
	}
	e.indexF = idx
	e.index = replay.NewIndexWriter(idx)
	return nil
}

// run starts following the session: from here on its changes kick the followers,
// and they catch up with what happened before. Once run was called, the node's wg
// counts the entry until end.
func (e *entry) run() {
	e.follow()
	e.kick(true)
	e.n.reclaim.Touch()
}

// follow sets the followers up, once (run, or end when it comes first).
func (e *entry) follow() {
	e.setup.Do(func() {
		e.pubView = e.s.Subscribe(e.publishFrom, session.ViewerOptions{MaxLag: int64(e.s.ScrollbackBytes()), SkipAhead: true, MaxChunk: api.MaxChunk, Linger: publishLinger})
		e.nextMark = 1
		for _, b := range e.s.Blocks() { // a reattached session: the earlier part has their markers
			if b.Start < e.resumeFrom {
				e.nextMark = b.N + 1
			}
		}
		e.recView = e.s.Subscribe(e.resumeFrom, session.ViewerOptions{MaxLag: int64(e.s.ScrollbackBytes()), MaxChunk: 64 << 10, Linger: recordLinger})
		e.pub.do, e.recd.do, e.ev.do = e.publish, e.record, e.pumpEvents
		e.ready.Store(true)
	})
}

// kick is the session's Config.Notify: something changed, the followers look (the
// event pump only when it was more than output). It never blocks (the session
// holds its lock).
func (e *entry) kick(noted bool) {
	if !e.ready.Load() {
		return
	}
	e.pub.kick()
	e.recd.kick()
	if noted {
		e.ev.kick()
	}
}

// close closes the session and waits for the entry's goroutines, then the recording.
func (e *entry) close() { e.end(e.s.Close) }

// detach is close for a session in a holder when the agent stops: the program
// goes on there, for the next agent to reattach (held.go).
func (e *entry) detach() { e.end(e.s.Detach) }

// end stops the session with stop (Close or Detach), lets the followers catch up
// with all of it, then closes the recording.
func (e *entry) end(stop func() error) {
	e.closeOnce.Do(func() {
		defer e.n.wg.Done()
		defer e.n.reclaim.Touch()
		e.follow()
		_ = stop()
		// The session is closed: its viewers return EOF once they have read
		// everything, so publishing and recording finish on their own.
		var data sync.WaitGroup
		data.Add(2)
		go func() { defer data.Done(); e.pub.finish() }()
		go func() { defer data.Done(); e.recd.finish() }()
		done := make(chan struct{})
		go func() { data.Wait(); close(done) }()
		t := time.NewTimer(drainGrace)
		select {
		case <-done:
		case <-t.C:
			e.n.log.Warn("session output slow to drain; cancelling", "session", e.id)
		}
		t.Stop()
		e.cancel()
		<-done
		e.ev.finish() // the events after the last pass (e.g. the exit)
		e.closePublished()
		e.recMu.Lock()
		if e.cast != nil {
			_ = e.writeExitLocked(true)
			_ = e.cast.Close()
			_ = e.castF.Close()
			_ = e.indexF.Close()
		}
		if e.rec != nil {
			_ = e.rec.Close()
		}
		e.recMu.Unlock()
	})
}

// publish publishes the output that is there (the publisher's drain).
func (e *entry) publish() {
	subject := e.n.subj.Out(e.n.cfg.Name, e.id)
	for e.ctx.Err() == nil {
		c, ok, wait, err := e.pubView.TryNext()
		if err != nil {
			return // io.EOF: exited or closed
		}
		if !ok {
			if wait == 0 || delay.Sleep(e.ctx, wait) != nil {
				return // caught up (the next change kicks), or cancelled
			}
			continue
		}
		if c, ok = since(c, e.publishFrom); !ok {
			continue
		}
		hdr := map[string]string{
			api.HeaderOffset: strconv.FormatInt(c.Offset, 10),
			api.HeaderTime:   time.Now().UTC().Format(time.RFC3339Nano),
		}
		// The mark goes first (a session in a holder): an agent killed between the
		// two leaves a gap, which subscribers read back by offset, never a repeat.
		e.notePublished(c.Offset + int64(len(c.Data)))
		if err := e.n.cfg.Bus.Publish(subject, hdr, c.Data); err != nil {
			e.notePublished(c.Offset) // not sent: the next agent may publish it
			if !e.pubFail {
				e.n.log.Warn("output not published; subscribers will read the gap", "session", e.id, "subject", subject, "offset", c.Offset, "err", err)
			}
			e.pubFail = true
			continue
		}
		e.n.published.Add(int64(len(c.Data)))
		if e.pubFail {
			e.n.log.Info("output publishing again", "session", e.id, "offset", c.Offset)
			e.pubFail = false
		}
	}
}

// record appends the output that is there to the recording (the recorder's
// drain), and flushes once caught up so readers of the file see it.
func (e *entry) record() {
	for !e.recEnded && e.ctx.Err() == nil {
		c, ok, wait, err := e.recView.TryNext()
		if err != nil {
			e.recEnded = true
			if !errors.Is(err, io.EOF) {
				// Lagged out of the scrollback: the recording is no longer exact.
				e.recMu.Lock()
				e.recErr = err
				e.recMu.Unlock()
				e.n.log.Error("recording stopped", "session", e.id, "err", err)
			}
			return
		}
		if !ok {
			if wait == 0 || delay.Sleep(e.ctx, wait) != nil {
				return
			}
			continue
		}
		if c, ok = since(c, e.resumeFrom); !ok {
			continue
		}
		e.recMu.Lock()
		err = e.rotateLocked()
		if err == nil {
			err = e.recordLocked(c)
		}
		if _, end := e.s.Offsets(); err == nil && end == c.Offset+int64(len(c.Data)) {
			err = e.flushLocked() // caught up: let readers of the file see it
		}
		if err != nil {
			e.recErr = err
		}
		e.recMu.Unlock()
		if err != nil {
			e.recEnded = true
			e.n.log.Error("recording write failed", "session", e.id, "err", err)
			return
		}
	}
}

// recordLocked appends chunk c to the recording, with the marker of each block that
// starts in it right before the block's first byte (the recorder writes markers, not
// the event pump: only it knows where in the output it is, so a marker's offset is its
// block's start in the index). recMu is held.
func (e *entry) recordLocked(c session.Chunk) error {
	t := time.Since(e.started)
	data, off := c.Data, c.Offset
	for {
		b, err := e.s.Block(e.nextMark)
		if err != nil || b.Start >= off+int64(len(data)) {
			break // no such block yet, or it starts after this chunk
		}
		if k := b.Start - off; k > 0 {
			if err := e.cast.Output(t, data[:k]); err != nil {
				return err
			}
			data, off = data[k:], b.Start
		}
		if err := e.cast.Marker(t, replay.BlockLabel(b.N, truncate(b.Command, 200))); err != nil {
			return err
		}
		e.nextMark++
	}
	if err := e.cast.Output(t, data); err != nil {
		return err
	}
	e.recTo = max(e.recTo, off+int64(len(data)))
	return e.writeExitLocked(false)
}

// writeExitLocked writes the pending exit status once the output before it is
// recorded (or at once with force, as the recording closes): the exit event
// reaches the entry apart from the output, and may come before the recorder
// has written the last chunks (and their blocks' markers). recMu is held.
func (e *entry) writeExitLocked(force bool) error {
	if e.exitPending == nil || e.cast == nil {
		return nil
	}
	if _, end := e.s.Offsets(); !force && max(e.recTo, e.resumeFrom) < end {
		return nil
	}
	code := *e.exitPending
	e.exitPending = nil
	return e.cast.Exit(time.Since(e.started), code)
}

func (e *entry) flushLocked() error {
	return e.cast.Flush()
}

// pumpEvents publishes the session's events that are there (the event pump's
// drain). Events come with marks, samples and exits, never with output alone;
// while a run waits, those of a burst (a block's end, state changes, the next
// prompt) come in one pass, FollowDelay late, after the run's reply.
func (e *entry) pumpEvents() {
	evs, _ := e.s.Events(e.evSeq)
	for _, ev := range evs {
		e.evSeq = ev.Seq
		e.handleEvent(e.n.cfg.Name, e.id, ev)
	}
}

func (e *entry) handleEvent(node, id string, ev session.Event) {
	if e.replayed > 0 && e.skipReplayed(ev) {
		return
	}
	bus := e.n.cfg.Bus
	if ev.Block != nil && (ev.Kind == session.EventBlockStarted || ev.Kind == session.EventBlockFinished) {
		typ := api.BlockStarted
		if ev.Kind == session.EventBlockFinished {
			typ = api.BlockFinished
		}
		be := api.BlockEvent{Type: typ, Node: node, Session: id, Seq: ev.Seq, Time: ev.Time, Block: toBlock(*ev.Block)}
		publishJSON(bus, e.n.subj.Block(node, id), be)
		if typ == api.BlockFinished { // its marker is the recorder's (recordLocked)
			b := ev.Block
			e.recMu.Lock()
			_ = e.index.Append(replay.IndexEntry{
				N: b.N, Command: b.Command, Cwd: b.Cwd, ExitCode: b.ExitCode, Note: b.Note,
				StartedAt: b.StartedAt, FinishedAt: b.FinishedAt, Start: b.Start, End: b.End, Fallback: b.Fallback,
				T: b.StartedAt.Sub(e.started).Seconds(), TEnd: b.FinishedAt.Sub(e.started).Seconds(),
			})
			e.recMu.Unlock()
		}
		return
	}
	se := api.SessionEvent{Type: string(ev.Kind), Node: node, Session: id, Seq: ev.Seq, Time: ev.Time,
		State: string(ev.State), Cwd: ev.Cwd, Cols: ev.Cols, Rows: ev.Rows, ExitCode: ev.ExitCode}
	if ev.Kind == session.EventResized {
		e.recMu.Lock()
		_ = e.cast.Resize(time.Since(e.started), ev.Cols, ev.Rows)
		e.hdr.Width, e.hdr.Height = ev.Cols, ev.Rows // the next part starts at this size
		e.recMu.Unlock()
	}
	publishJSON(bus, e.n.subj.Event(node, id), se)
	if ev.Kind == session.EventExited {
		if ev.ExitCode != nil {
			e.recMu.Lock()
			code := *ev.ExitCode
			e.exitPending = &code
			_ = e.writeExitLocked(false) // else the recorder writes it after the last output, or the close
			e.recMu.Unlock()
		}
		e.n.kickReaper()
	}
	if ev.Kind == session.EventState && ev.State == session.StateWaitingInput {
		e.guard.AnswerPrompt(e)
	}
}

// recorded reports the oldest output offset the recording holds, and whether the
// recording is exact (it can serve any range from there on).
func (e *entry) recorded() (from int64, ok bool) {
	e.recMu.Lock()
	defer e.recMu.Unlock()
	return e.heldFromLocked(), e.recErr == nil
}

// readRecorded reads [from, to) of the output from the recording, for ranges that
// have left the scrollback; the reply may be short (it ends at a part's end). Output
// the recording quota dropped is errDropped.
func (e *entry) readRecorded(from, to int64) ([]byte, error) {
	e.recMu.Lock()
	defer e.recMu.Unlock()
	if e.recErr != nil {
		return nil, e.recErr
	}
	if from < e.partStart {
		return e.readPartLocked(from, to)
	}
	from, to = from-e.partStart, to-e.partStart
	if err := e.flushLocked(); err != nil {
		return nil, err
	}
	if e.rec == nil {
		rec, err := replay.Open(e.castTo)
		if err != nil {
			return nil, err
		}
		e.rec = rec
	} else if e.rec.End() < to {
		if err := e.rec.Refresh(); err != nil {
			return nil, err
		}
	}
	return e.rec.ReadRange(from, min(to, e.rec.End()))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
