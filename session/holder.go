package session

// The holder backend: a session whose PTY, program and raw output a holder process
// keeps (package holder), so it outlives this process. Everything else stays here
// as with a local PTY: the mark scanner, blocks, state, the scrollback ring, the
// screen, the guard. What differs:
//
//   - the output comes from the holder's attach stream instead of a read of the
//     master (only the holder reads the master); offsets are the holder's, so they
//     continue across a reattach;
//   - the exit status comes from the holder (it reaps the program);
//   - input, resizes and the kernel state use the copy of the master the holder
//     passes (SCM_RIGHTS), and /proc of the program, exactly as locally;
//   - Close asks the holder to end the session; Detach leaves it running.
//
// Reattach (a new agent) rebuilds a session by replaying the holder's ring through
// the same read path from a checkpoint (checkpoint.go), with the blocks and the
// scrollback before it from the recording; without one, from the ring's start.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/sandbox"
)

// holderTimeout bounds each request to the holder.
const holderTimeout = 10 * time.Second

// ErrNotHeld is returned by Reattach for a session the holder does not have.
var ErrNotHeld = errors.New("session: not in the holder")

// holderMeta is what the session leaves with the holder to be rebuilt from: the
// holder keeps it opaque, in memory.
type holderMeta struct {
	Shell       string            `json:"shell,omitempty"`
	Argv        []string          `json:"argv"`
	Cwd         string            `json:"cwd"`
	Title       string            `json:"title,omitempty"`
	Description string            `json:"description,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	Cols        int               `json:"cols"`
	Rows        int               `json:"rows"`
	// Sandbox is the profile the program runs under.
	Sandbox *api.SandboxProfile `json:"sandbox,omitempty"`
	// Checkpoints are where a replay can begin (checkpoint.go), oldest first.
	Checkpoints []checkpoint `json:"checkpoints,omitempty"`
}

// held is a session's link to its holder.
type held struct {
	c   *holder.Client
	raw atomic.Int64 // the holder's offset of the output ingested so far
	// detached is set by Detach before it ends the stream: the output goes on in
	// the holder, for the next agent (see endDetached).
	detached atomic.Bool
	// retakes counts the streams the read loop took back (retake); it alone
	// uses it.
	retakes int

	mu    sync.Mutex     // guards st, ended
	st    *holder.Stream // the attach stream the read loop reads
	ended bool           // Detach or Close ended the stream: no other is taken
}

// stream is the session's attach stream now.
func (h *held) stream() *holder.Stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st
}

// replace makes st the session's stream, unless Detach or Close ended the
// stream meanwhile: then st is closed, and replace reports false.
func (h *held) replace(st *holder.Stream) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		st.Close()
		return false
	}
	h.st = st
	return true
}

// end ends the session's stream for Detach and Close (the read loop then takes
// no other).
func (h *held) end() {
	h.mu.Lock()
	h.ended = true
	st := h.st
	h.mu.Unlock()
	st.Close()
}

// startInHolder is Start's second half for Config.Holder: the holder spawns the
// program with the nonce and guard channels prepared here.
func (s *Session) startInHolder(argv []string, dir string, env []string, as *runAs, wrap *sandbox.Wrapped) (*Session, error) {
	cfg := s.cfg
	if cfg.ID == "" {
		s.integ.remove()
		return nil, fmt.Errorf("%w: a session in a holder needs an ID", ErrBadConfig)
	}
	sp := holder.Spawn{ID: cfg.ID, Argv: argv, Dir: dir, Env: dedupEnv(env), Cols: s.cols, Rows: s.rows, Ring: s.ring.Size()}
	if as != nil && wrap == nil { // else the wrapper drops to the user once it confined itself
		cr := as.credential()
		sp.Cred, sp.UID, sp.GID, sp.Groups = true, cr.Uid, cr.Gid, cr.Groups
	}
	sp.UserNS = wrap != nil && len(cfg.Hide) > 0 // its mounts, on a node without root
	meta, _ := json.Marshal(holderMeta{Shell: s.shell, Argv: s.argv, Cwd: dir, Title: s.title, Description: s.description,
		Labels: s.labels, CreatedAt: s.createdAt, Cols: s.cols, Rows: s.rows, Sandbox: s.sandbox})
	sp.Meta = meta
	var files []*os.File
	var guardConn *net.UnixConn
	guardKeep := -1
	fail := func(err error) (*Session, error) {
		for _, f := range files {
			f.Close()
		}
		if wrap != nil {
			wrap.CloseChild()
		}
		if guardConn != nil {
			guardConn.Close()
			unix.Close(guardKeep)
		}
		s.integ.remove()
		return nil, err
	}
	if s.integrated {
		sp.Nonce = s.integ.nonce
		nf, err := nonceSocket(s.integ.nonce)
		if err != nil {
			return fail(fmt.Errorf("%w: %v", ErrStart, err))
		}
		files = append(files, nf)
		sp.ChildFDs = append(sp.ChildFDs, nonceFD)
		if cfg.Guard != nil {
			gc, gf, gk, err := guardSocket()
			if err != nil {
				return fail(fmt.Errorf("%w: %v", ErrStart, err))
			}
			guardConn, guardKeep = gc, gk
			files = append(files, gf)
			sp.ChildFDs = append(sp.ChildFDs, guardFD)
			keep, err := dupConn(gc) // the holder keeps a copy: the channel outlives us
			if err != nil {
				return fail(fmt.Errorf("%w: guard channel: %v", ErrStart, err))
			}
			files = append(files, keep)
			sp.Keep = true
		}
	}
	if wrap != nil {
		sp.ChildFDs = append(sp.ChildFDs, sandbox.FD, sandbox.FD+1)
		if sp.Keep { // the kept file comes last
			files = append(files[:len(files)-1], append(slices.Clone(wrap.Child), files[len(files)-1])...)
		} else {
			files = append(files, wrap.Child...)
		}
		wrap.Child = nil // closed with files
	}
	ctx, cancel := context.WithTimeout(context.Background(), holderTimeout)
	defer cancel()
	info, master, err := cfg.Holder.Spawn(ctx, sp, files...)
	for _, f := range files {
		f.Close()
	}
	files = nil
	if err != nil {
		if wrap != nil {
			_ = wrap.Wait(0)
		}
		return fail(fmt.Errorf("%w: %v", ErrStart, err))
	}
	if wrap != nil {
		if werr := wrap.Wait(sandboxWait); werr != nil {
			master.Close()
			_, _ = cfg.Holder.CloseSession(ctx, cfg.ID)
			return fail(fmt.Errorf("%w: %w", ErrSandbox, werr))
		}
	}
	master.Close() // the attach brings another copy
	st, err := cfg.Holder.Attach(ctx, cfg.ID, 0, 0)
	if err != nil {
		_, _ = cfg.Holder.CloseSession(ctx, cfg.ID)
		return fail(fmt.Errorf("%w: attach: %v", ErrStart, err))
	}
	if st.Kept != nil {
		st.Kept.Close() // ours is guardConn, made here
		st.Kept = nil
	}
	s.pid = info.PID
	if s.integrated {
		s.image, _ = readImage(s.pid)
	}
	nonce := ""
	if s.integ != nil { // a program run without shell integration has none
		nonce = s.integ.nonce
	}
	s.mu.Lock()
	s.startHeld(cfg.Holder, st, guardConn, guardKeep, nonce)
	s.mu.Unlock()
	s.log.Debug("session started in the holder", "pid", s.pid, "argv", argv, "tty", s.tty)
	return s, nil
}

// startHeld starts the goroutines of a session over the stream st (s.mu held).
func (s *Session) startHeld(c *holder.Client, st *holder.Stream, guardConn *net.UnixConn, guardKeep int, nonce string) {
	s.master = st.Master
	s.tty = ptsName(st.Master)
	s.hold = &held{c: c, st: st}
	s.screen = newScreen(s, s.cols, s.rows)
	s.emitLocked(Event{Kind: EventCreated, State: StateStarting})
	s.setPollLocked(0) // the sampler runs until the shell is idle at its prompt
	s.wg.Add(1)
	go s.heldReadLoop() // it records the exit too: it comes with the stream's end
	s.startGuard(guardConn, guardKeep, nonce)
}

// startGuard starts answering the shell's guard questions on conn (nil: the
// session has no guard). It runs before the session is handed out: s.guard is
// read by Close and Detach only.
func (s *Session) startGuard(conn *net.UnixConn, keep int, nonce string) {
	if conn == nil {
		return
	}
	s.guard = newGuard(s, conn, keep, nonce, s.cfg.Guard)
	s.wg.Add(1)
	go s.guard.readLoop() // it starts the worker when a request comes
}

// Reattach rebuilds session cfg.ID from the holder cfg.Holder (a new agent after a
// crash or restart): it returns once the output the holder held at the attach has
// been ingested. Shell, Argv, Dir, Cols, Rows, Title, Description and Labels come
// from the holder (cfg's are ignored); Guard, Redactor, Logger, Settle and
// ScrollbackBytes from cfg.
//
// rec is what the previous agent's recording knows. The replay begins at the
// newest checkpoint (checkpoint.go) the holder's ring and the recording both cover:
// blocks before it, their numbers, commands, exit codes and offsets, are the
// recording's, and so is the scrollback before it (redacted as it was produced);
// offsets, block numbers and events go on exactly from there; when the ring lost
// the output after it, from the ring's oldest byte, after the recording's end.
// Without one (an
// agent that died before its first block, or a recording that lags), the replay
// begins at the holder's oldest byte: from the session's first byte the rebuilt
// blocks, offsets, state and screen are those the output makes, and a rebuilt
// block of the same number takes the recording's command, cwd and times (a replay
// sees the shell's echo, not what was submitted, and replays at once); once the
// ring has wrapped, offsets start at the holder's oldest offset instead, and block
// numbers at 1 (a documented limit).
func Reattach(cfg Config, rec Recorded) (*Session, error) {
	if cfg.Holder == nil || cfg.ID == "" {
		return nil, fmt.Errorf("%w: Reattach needs Holder and ID", ErrBadConfig)
	}
	s := &Session{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("session", cfg.ID)
	ctx, cancel := context.WithTimeout(context.Background(), holderTimeout)
	defer cancel()
	st, err := cfg.Holder.Attach(ctx, cfg.ID, 0, 0)
	if errors.Is(err, holder.ErrStale) {
		// Another process is attached to it (an agent that hangs, or a program
		// with the holder's uid): ours is the session; take its stream.
		st, err = takeStream(ctx, cfg.Holder, cfg.ID, 0, s.log)
	}
	if errors.Is(err, holder.ErrNoSession) {
		return nil, fmt.Errorf("%w: %s", ErrNotHeld, cfg.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: attach: %v", ErrStart, err)
	}
	var m holderMeta
	if err := json.Unmarshal(st.Info.Meta, &m); err != nil || len(m.Argv) == 0 {
		closeStream(st)
		return nil, fmt.Errorf("%w: the holder's description of %s: %v", ErrStart, cfg.ID, err)
	}
	// Begin at a checkpoint when one fits (checkpoint.go): the recording is the
	// truth for what came before it.
	ck := pickCheckpoint(m.Checkpoints, st.From, rec)
	base := int64(-1) // the offset the replay begins at (restoreLocked)
	if ck == nil {
		// The ring wrapped past every checkpoint that fits while no agent read
		// it (a slow or dead agent, a flood): begin in the state of the newest
		// one before the ring, with what the ring lost counted as lost output.
		if ck = pickCheckpoint(m.Checkpoints, math.MinInt64, rec); ck != nil {
			base = lostBase(ck, st.From, rec)
		}
	} else if ck.Raw != st.From {
		st2, err := cfg.Holder.Attach(ctx, cfg.ID, ck.Raw, st.Epoch)
		switch {
		case err != nil:
			ck = nil
		case st2.From != ck.Raw:
			// The ring moved past it meanwhile (st is ended by the newer
			// attach): as above, from the oldest byte the ring has.
			closeStream(st)
			st = st2
			base = lostBase(ck, st.From, rec)
		default:
			closeStream(st) // ended by the newer attach anyway
			st = st2
		}
	}
	sb := cfg.ScrollbackBytes
	if sb == 0 {
		sb = DefaultScrollbackBytes
	}
	if s.cfg.Settle <= 0 {
		s.cfg.Settle = DefaultSettle
	}
	s.createdAt, s.argv, s.shell, s.integrated = m.CreatedAt, m.Argv, m.Shell, m.Shell != ""
	s.cols, s.rows, s.cwd = m.Cols, m.Rows, m.Cwd
	s.title, s.description, s.labels = m.Title, m.Description, m.Labels
	s.sandbox = m.Sandbox
	if ck != nil {
		s.restoreLocked(ck, rec, sb, base)
	} else {
		s.initLocked(sb, st.From)
	}
	s.rawIn = st.From
	s.pid = st.Info.PID
	if s.integrated {
		s.scanner = newMarkScanner(st.Nonce)
		s.image, _ = readImage(s.pid)
	} else {
		s.scanner = newMarkScanner("")
		s.scanner.osc133, s.scanner.osc7 = nil, nil
	}
	var guardConn *net.UnixConn
	if st.Kept != nil {
		if cfg.Guard != nil {
			if c, err := net.FileConn(st.Kept); err == nil {
				guardConn = c.(*net.UnixConn)
			}
		}
		st.Kept.Close()
		st.Kept = nil
	}
	end := st.Info.End
	s.mu.Lock()
	// The guard starts once the backlog is in (below): a question the shell asked
	// while no agent ran is answered after the replay of the marks before it, which
	// would otherwise take the answer's denial for theirs.
	s.startHeld(cfg.Holder, st, nil, -1, st.Nonce)
	s.mu.Unlock()
	// Wait until the backlog is in: the caller then sees the session as it was.
	deadline := time.NewTimer(holderTimeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		done, ch := s.hold.raw.Load() >= end || s.readDone, s.changedLocked()
		s.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ch:
			continue
		case <-deadline.C:
		}
		break
	}
	s.mu.Lock()
	s.updateStateLocked() // a replay of nothing (from a checkpoint at the end) leaves it unset
	s.mu.Unlock()
	s.startGuard(guardConn, -1, st.Nonce) // no copy of the shell's end after a restart: see guard.go's unblock
	if s.guard != nil {
		s.guard.askAgain() // a question the last agent read and did not answer is asked again
	}
	s.mu.Lock()
	s.adoptKnownLocked(rec.Blocks)
	s.mu.Unlock()
	s.mu.Lock()
	scrollback := s.ring.Start()
	s.mu.Unlock()
	switch {
	case ck != nil && base >= 0:
		s.log.Warn("the holder's ring lost output after the newest checkpoint while no agent read it: replayed from its oldest byte in the checkpoint's state",
			"raw", ck.Raw, "offset", ck.Off, "blocks", ck.Blocks, "oldest", st.From, "resumed", base)
	case ck != nil:
		s.log.Info("replayed from a checkpoint, the output before it from the recording", "raw", ck.Raw, "offset", ck.Off, "blocks", ck.Blocks, "scrollback", scrollback)
	case st.From > 0:
		s.log.Warn("the holder's ring no longer holds the session's first output and no checkpoint fits: offsets and blocks restart at its oldest byte", "oldest", st.From)
	}
	s.log.Info("session reattached", "pid", s.pid, "offset", end)
	return s, nil
}

// closeStream closes an attach stream and the files it brought.
func closeStream(st *holder.Stream) {
	st.Close()
	st.Master.Close()
	if st.Kept != nil {
		st.Kept.Close()
	}
}

// adoptKnownLocked gives rebuilt blocks what the recording knew of them.
func (s *Session) adoptKnownLocked(known []Block) {
	byN := make(map[int]*Block, len(known))
	for i := range known {
		byN[known[i].N] = &known[i]
	}
	for _, b := range s.blocks {
		k, ok := byN[b.N]
		if !ok || k.State == BlockDone && k.Start != b.Start {
			// Not this block: the replay restarted at the ring's oldest byte and
			// numbered its blocks from 1 (no checkpoint fitted), so the recording's
			// block of that number is another one.
			continue
		}
		if k.Command != "" {
			b.Command = k.Command
		}
		if k.Cwd != "" {
			b.Cwd = k.Cwd
		}
		if !k.StartedAt.IsZero() {
			b.StartedAt = k.StartedAt
		}
		if !k.FinishedAt.IsZero() && !b.FinishedAt.IsZero() {
			b.FinishedAt = k.FinishedAt
		}
		if k.State == BlockDone && k.Note != "" && b.State == BlockDone && b.ExitCode == nil {
			// Why it has no exit code, as the live session knew it: a replay
			// cannot know that the guard denied the line (it sees only the marks).
			b.Note = k.Note
		}
	}
}

// heldReadLoop is readLoop over the holder's stream, and the exit work: the program's
// exit comes with the stream's end.
func (s *Session) heldReadLoop() {
	defer s.wg.Done()
	var r chunkReader
	st := s.hold.stream()
	raw := st.From      // the holder's offset: raw output, before marks are taken out
	held := st.Info.End // the output the holder held at the attach
	caught := false     // it is in
	nextCkpt := s.checkpointEvery()
	s.mu.Lock()
	if n := len(s.ckpts); n > 0 {
		nextCkpt = s.ckpts[n-1].Raw + nextCkpt
	}
	s.mu.Unlock()
	for {
		ch, err := st.Next()
		if err == nil && ch.Exited {
			s.endRead(nil)
			s.recordExit(ch.Code) // the exit comes with the end of the stream
			return
		}
		if err != nil {
			// A stream that breaks without the exit: Detach or Close ended it,
			// another process took it (taken back: retake), or the holder is
			// gone, and the program with it.
			if next := s.retake(raw, err); next != nil {
				st = next
				continue
			}
			if s.hold.detached.Load() {
				s.endDetached()
			} else {
				s.endRead(nil)
			}
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if !closed { // Detach or Close: not our exit to record
				s.recordExit(nil)
			}
			return
		}
		if ch.Off != raw {
			// The holder's ring lost output while nobody read it: the session's
			// offsets go on from where they are, without those bytes.
			s.log.Warn("holder output lost", "from", raw, "to", ch.Off)
		}
		raw = ch.Off + int64(len(ch.Data))
		r.raw = raw
		r.ingest(s, ch.Data)
		s.hold.raw.Store(raw)
		if raw >= nextCkpt {
			s.mu.Lock()
			every := s.checkpointEvery()
			if s.checkpointLocked(raw, false) {
				nextCkpt = raw + every
			} else {
				nextCkpt = raw + every/16 // not now (no simple state): look again a little later, not at every chunk
			}
			s.mu.Unlock()
		}
		if !caught && raw >= held {
			caught = true // Reattach waits for this: wake it (the ingest woke it before the store)
			s.mu.Lock()
			s.broadcastLocked()
			s.mu.Unlock()
		}
	}
}

// endDetached ends the read after Detach. What the mark scanner and the redactor
// hold back is not released as output, unlike at the output's end: it gets no
// offset here. The next agent replays it from the holder with what follows (a
// mark's first part is then a mark, not output), so each byte it gives an offset
// gets the one this agent gave it, and its publisher and recorder, which go on
// from this agent's offsets, neither skip nor repeat; nor does a mark's nonce ever
// reach the output.
func (s *Session) endDetached() {
	s.mu.Lock()
	s.readDone = true
	s.broadcastLocked()
	s.mu.Unlock()
}

// ptsName is the slave's path of a master.
func ptsName(master *os.File) string {
	var n int
	err := masterControl(master, func(fd int) error {
		var err error
		n, err = unix.IoctlGetInt(fd, unix.TIOCGPTN)
		return err
	})
	if err != nil {
		return ""
	}
	return "/dev/pts/" + strconv.Itoa(n)
}

// Detach stops this process's part of a session in a holder and leaves the program
// running there, for the next agent to Reattach: the agent's graceful restart. For a
// local session it is Close.
func (s *Session) Detach() error {
	if s.hold == nil {
		return s.Close()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	s.stopPollLocked()
	s.broadcastLocked()
	s.mu.Unlock()
	close(s.stop)
	s.hold.detached.Store(true)
	s.hold.end()
	s.master.Close()
	if s.guard != nil {
		s.guard.stop()
	}
	s.wg.Wait()
	s.screen.close()
	s.mu.Lock()
	save := s.metaDirty // the newest checkpoint is not in the holder yet
	s.mu.Unlock()
	if save {
		s.setHeldMeta()
	}
	return nil
}

// closeHeld ends the session in its holder (Close).
func (s *Session) closeHeld() {
	ctx, cancel := context.WithTimeout(context.Background(), holderTimeout)
	defer cancel()
	if _, err := s.hold.c.CloseSession(ctx, s.cfg.ID); err != nil && !errors.Is(err, holder.ErrNoSession) {
		s.log.Warn("holder did not close the session", "err", err)
	}
	s.hold.end()
}

// setHeldMeta tells the holder the session's new metadata, for a reattach. It
// blocks for a round trip to the holder.
func (s *Session) setHeldMeta() {
	if s.hold == nil {
		return
	}
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	s.mu.Lock()
	s.metaDirty = false // what a running metaSender would send, this sends
	meta := s.heldMetaLocked()
	s.mu.Unlock()
	s.putHeldMeta(meta)
}

// heldMetaLocked is the metadata the holder keeps for a reattach.
func (s *Session) heldMetaLocked() []byte {
	meta, _ := json.Marshal(holderMeta{Shell: s.shell, Argv: s.argv, Cwd: s.cwd, Title: s.title, Description: s.description,
		Labels: s.labels, CreatedAt: s.createdAt, Cols: s.cols, Rows: s.rows, Checkpoints: s.ckpts})
	return meta
}

// putHeldMeta sends meta to the holder (a round trip).
func (s *Session) putHeldMeta(meta []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), holderTimeout)
	defer cancel()
	if err := s.hold.c.SetMeta(ctx, s.cfg.ID, meta); err != nil {
		s.log.Warn("holder did not take the session's metadata", "err", err)
	}
}
