package node

// Sessions in a holder (Config.Holder): created there, detached (not closed) when the
// agent stops, and reattached when the next agent starts on the same data dir, with
// the same ids. What a reattached session gets back:
//
//   - its blocks, offsets, state and screen: session.Reattach replays the holder's
//     ring; commands and times come from the recording's block index;
//   - its recording: the part the previous agent wrote is closed as a rotated part
//     (output.<start>.cast) and a new output.cast goes on from the offset the
//     recording ended at, so nothing is recorded twice and nothing is missing;
//   - its publication: output is published again from where the previous
//     publisher's last Publish ended (it writes that offset to
//     DIR/sessions/ID/published before each one, and puts it back when the Publish
//     fails: a kill -9 between the two cannot make it publish twice); what the bus
//     had buffered and lost with the process is a gap a subscriber reads with the
//     read verb, as after any NATS outage;
//   - its events: the replay's own events are not published again, except the end of
//     a block the recording did not have (a command that finished while no agent
//     ran) and what happens from then on.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/replay"
	"github.com/fleetmux/fleetmux/session"
)

// reattachTimeout bounds asking the holder for its sessions.
const reattachTimeout = 10 * time.Second

// reattach brings back every session the holder keeps. New calls it; a session that
// cannot be brought back is logged and left in the holder.
func (n *Node) reattach() error {
	ctx, cancel := context.WithTimeout(context.Background(), reattachTimeout)
	defer cancel()
	list, err := n.cfg.Holder.List(ctx)
	if err != nil {
		return fmt.Errorf("node: the holder's sessions: %w", err)
	}
	sort.Slice(list, func(i, j int) bool { return idNum(list[i].ID) < idNum(list[j].ID) })
	for _, h := range list {
		if err := n.reattachOne(h.ID); err != nil {
			n.log.Error("session not reattached", "session", h.ID, "err", err)
		}
	}
	return nil
}

func idNum(id string) int {
	v, err := strconv.Atoi(strings.TrimPrefix(id, "s"))
	if err != nil || !strings.HasPrefix(id, "s") {
		return -1
	}
	return v
}

func (n *Node) reattachOne(id string) error {
	num := idNum(id)
	if num < 1 {
		return fmt.Errorf("not a session id of this node: %q", id)
	}
	e := &entry{n: n, id: id, num: num, dir: filepath.Join(n.cfg.DataDir, "sessions", id)}
	e.guard = n.guard.NewSession(e)
	e.castTo = filepath.Join(e.dir, "output.cast")
	e.loadOwner()
	idx, err := replay.OpenIndex(e.castTo)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		n.log.Warn("block index unreadable: rebuilt blocks keep the commands the replay sees", "session", id, "err", err)
	}
	known := make([]session.Block, 0, len(idx))
	indexed := map[int]bool{}
	for _, ie := range idx {
		known = append(known, session.Block{N: ie.N, Command: ie.Command, Cwd: ie.Cwd, State: session.BlockDone, ExitCode: ie.ExitCode, Note: ie.Note,
			StartedAt: ie.StartedAt, FinishedAt: ie.FinishedAt, Start: ie.Start, End: ie.End, Fallback: ie.Fallback})
		indexed[ie.N] = true
	}
	known = append(known, startedBlocks(e.castTo, indexed)...) // running at the restart: only their start marker
	red, redFrom := n.newSessionRedactor()
	var ep atomic.Pointer[entry]
	var shellCheck func(context.Context, string) session.GuardVerdict
	registered := make(chan struct{}) // closed once ep is stored, or the reattach failed
	defer func() {
		select {
		case <-registered:
		default:
			close(registered)
		}
	}()
	if n.cfg.Policy != nil {
		// The shell may have asked about a line while no agent ran: the question
		// comes in as soon as the session is back, before it is registered here.
		inner := n.shellGuard(&ep)
		shellCheck = func(ctx context.Context, line string) session.GuardVerdict {
			select {
			case <-registered:
			case <-ctx.Done():
			}
			return inner(ctx, line)
		}
	}
	s, err := session.Reattach(session.Config{
		ID: id, Holder: n.cfg.Holder, ScrollbackBytes: n.cfg.ScrollbackBytes, Logger: n.log,
		Redactor: red, Guard: shellCheck, Notify: e.kick,
	}, recordedOf(e.dir, e.castTo, known))
	if err != nil {
		return err
	}
	e.s = s
	info := s.Info()
	e.started = info.CreatedAt
	_, seq := s.Events(0) // what the replay emitted: published before, except what follows
	e.replayed, e.indexed = seq, indexed
	from, err := e.resumeRecording()
	if err != nil {
		s.Detach()
		return fmt.Errorf("recording of %s: %w", id, err)
	}
	e.resumeFrom = from
	e.publishFrom = from
	if p, ok := readPublished(e.dir); ok && p >= from {
		e.publishFrom = p // the recorder may lag the publisher: never publish twice
	}
	e.openPublished()
	e.ctx, e.cancel = context.WithCancel(n.ctx)
	n.mu.Lock()
	if n.nextID <= num { // a counter older than the holder's sessions: never reuse an id
		n.nextID = num + 1
	}
	n.sessions[id] = e
	ep.Store(e)
	close(registered)
	n.wg.Add(1)
	n.mu.Unlock()
	n.redactStarted(e, redFrom)
	e.run() // the node's wg counts the entry until its end
	// An agent's session: tracked as the agent again (agentsave.go).
	n.reattachAgent(e)
	n.log.Info("session reattached", "session", id, "offset", info.OutputOffset, "blocks", info.Blocks, "recorded", from)
	return nil
}

// recordedOf is what the previous agent's recording in dir (current part castPath)
// knows, for session.Reattach: known blocks, where it ends, and its output.
func recordedOf(dir, castPath string, known []session.Block) session.Recorded {
	rec, err := replay.Open(castPath)
	if err != nil {
		return session.Recorded{Blocks: known}
	}
	start, end := rec.Header().Offset, rec.Header().Offset+rec.End()
	rec.Close()
	parts := map[int64]string{start: castPath}
	ents, _ := os.ReadDir(dir)
	for _, de := range ents { // the rotated parts, output.<start>.cast
		if v, ok := strings.CutPrefix(de.Name(), "output."); ok {
			if v, ok := strings.CutSuffix(v, ".cast"); ok {
				if off, err := strconv.ParseInt(v, 10, 64); err == nil && off >= 0 && off < start {
					parts[off] = filepath.Join(dir, de.Name())
				}
			}
		}
	}
	starts := make([]int64, 0, len(parts))
	for off := range parts {
		starts = append(starts, off)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	read := func(from, to int64) ([]byte, error) {
		return readParts(parts, starts, end, from, to)
	}
	return session.Recorded{Blocks: known, End: end, Start: starts[0], Output: read}
}

// readParts reads [from, to) from the recording's parts (starts sorted, each part
// up to the next one's start, the last up to end); an error when a part is
// missing or short.
func readParts(parts map[int64]string, starts []int64, end, from, to int64) ([]byte, error) {
	if from < starts[0] || to > end || from > to {
		return nil, fmt.Errorf("[%d, %d) is not in the recording [%d, %d)", from, to, starts[0], end)
	}
	out := make([]byte, 0, to-from)
	for i, st := range starts {
		stop := end
		if i+1 < len(starts) {
			stop = starts[i+1]
		}
		if from >= stop || from >= to {
			continue
		}
		rec, err := replay.Open(parts[st])
		if err != nil {
			return nil, err
		}
		b, err := rec.ReadRange(from-st, min(to, stop)-st)
		rec.Close()
		if err != nil {
			return nil, err
		}
		if int64(len(b)) != min(to, stop)-from {
			return nil, fmt.Errorf("part %d gave %d bytes of [%d, %d)", st, len(b), from, min(to, stop))
		}
		out = append(out, b...)
		from += int64(len(b))
	}
	return out, nil
}

// resumeRecording closes the recording's current part as a rotated one and starts a
// new part where it ended; it returns that offset. A session without a recording
// (it was created, the agent died before writing it) gets a new one from 0.
func (e *entry) resumeRecording() (int64, error) {
	e.recMu.Lock()
	defer e.recMu.Unlock()
	info := e.s.Info()
	e.hdr = replay.Header{Width: info.Cols, Height: info.Rows, Timestamp: info.CreatedAt, Title: info.Title,
		Env: map[string]string{"SHELL": info.Shell, "TERM": "xterm-256color"}, Command: strings.Join(info.Argv, " ")}
	rec, err := replay.Open(e.castTo)
	if errors.Is(err, os.ErrNotExist) {
		return 0, e.startRecordingLocked()
	}
	if err != nil {
		return 0, err
	}
	start, end := rec.Header().Offset, rec.Header().Offset+rec.End()
	e.hdr.Start = rec.Duration() // the new part's intervals count from the old one's last event
	rec.Close()
	ents, err := os.ReadDir(e.dir)
	if err != nil {
		return 0, err
	}
	for _, de := range ents { // the rotated parts, output.<start>.cast
		name := de.Name()
		if v, ok := strings.CutPrefix(name, "output."); ok {
			if v, ok := strings.CutSuffix(v, ".cast"); ok {
				if off, err := strconv.ParseInt(v, 10, 64); err == nil {
					e.parts = append(e.parts, off)
				}
			}
		}
	}
	if err := os.Rename(e.castTo, partPath(e.dir, start)); err != nil {
		return 0, err
	}
	e.parts = append(e.parts, start)
	sort.Slice(e.parts, func(i, j int) bool { return e.parts[i] < e.parts[j] })
	e.parts = compactParts(e.parts)
	e.partStart = end
	e.hdr.Offset = end
	idxF, err := os.OpenFile(filepath.Join(e.dir, "output.blocks.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return 0, err
	}
	e.indexF = idxF
	e.index = replay.NewIndexWriter(idxF)
	if err := e.openPartLocked(); err != nil {
		idxF.Close()
		return 0, err
	}
	return end, nil
}

// startRecordingLocked is startRecording for a reattached session with none.
func (e *entry) startRecordingLocked() error {
	e.recMu.Unlock()
	defer e.recMu.Lock()
	return e.startRecording(e.hdr)
}

func compactParts(p []int64) []int64 {
	out := p[:0]
	for i, v := range p {
		if i == 0 || v != p[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// skipReplayed reports whether an event is one the replay re-emitted, published
// by the previous agent already.
func (e *entry) skipReplayed(ev session.Event) bool {
	if ev.Seq > e.replayed {
		return false
	}
	if ev.Kind == session.EventBlockFinished && ev.Block != nil && !e.indexed[ev.Block.N] {
		return false // finished while no agent ran: not published, not indexed
	}
	return true
}

// startedBlocks reads the block start markers ("block N: COMMAND") of the
// recording's current part, for blocks not in the index (still running when the
// agent stopped); a command cut short in its marker is left out.
func startedBlocks(castPath string, indexed map[int]bool) []session.Block {
	f, err := os.Open(castPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []session.Block
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"m"`)) {
			continue
		}
		var ev []any
		if json.Unmarshal(line, &ev) != nil || len(ev) != 3 || ev[1] != "m" {
			continue
		}
		label, _ := ev[2].(string)
		rest, ok := strings.CutPrefix(label, "block ")
		if !ok {
			continue
		}
		num, cmd, ok := strings.Cut(rest, ": ")
		nb, err := strconv.Atoi(num)
		if !ok || err != nil || indexed[nb] || strings.HasSuffix(cmd, "…") {
			continue
		}
		out = append(out, session.Block{N: nb, Command: cmd})
	}
	return out
}

// since is the part of c from offset off on (false: none of it). A reattached
// session's publisher and recorder go on from where the previous agent's got to;
// while its replay is still short of that (Reattach stops waiting for it after a
// while), Subscribe starts their viewers at the output's end instead, and what
// comes before off was published, or recorded, already.
func since(c session.Chunk, off int64) (session.Chunk, bool) {
	if c.Offset >= off {
		return c, true
	}
	skip := off - c.Offset
	if skip >= int64(len(c.Data)) {
		return c, false
	}
	c.Offset, c.Data = off, c.Data[skip:]
	return c, true
}

// publishedName is the file that keeps how far a held session's output was
// published: the decimal offset, rewritten in place after each publication.
const publishedName = "published"

func readPublished(dir string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, publishedName))
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil && v >= 0
}

// openPublished opens the published mark of a session in a holder.
func (e *entry) openPublished() {
	if e.n.cfg.Holder == nil {
		return
	}
	f, err := datadir.OpenFile(filepath.Join(e.dir, publishedName), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		e.n.log.Warn("publication mark not kept: a restart may publish output twice", "session", e.id, "err", err)
		return
	}
	e.pubMark = f
}

// notePublished records that the output up to end is published (the publisher
// calls it before each Publish: see held.go's doc); a fixed-width write at the
// start of the file: one syscall, no truncation window.
func (e *entry) notePublished(end int64) {
	if e.pubMark == nil {
		return
	}
	_, _ = e.pubMark.WriteAt([]byte(fmt.Sprintf("%020d\n", end)), 0)
}

func (e *entry) closePublished() {
	if e.pubMark != nil {
		e.pubMark.Close()
	}
}
