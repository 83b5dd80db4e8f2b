package session

// Checkpoints: where a new agent can begin the replay of a holder's ring other than
// at the session's first byte.
//
// Reattach rebuilds a session by replaying the holder's raw output through the read
// path. The session's offsets count that output without the shell's marks (and
// after redaction), so only a replay from the first byte yields the same offsets
// and blocks; once the holder's ring has wrapped (a session's output outgrew the
// scrollback), the replay has to begin where the session's state is known. While
// output flows, the read loop notes such points, each time the raw output has grown
// by a quarter of the ring since the last one: the holder's raw offset, the
// session's offset and event number there, and the state of the block machine
// (at the prompt, or running block N). It notes them only where that state is all
// there is (no redacted text held back, no submission, guard question or fallback
// block in the air; the start of a mark the scanner holds back is replayed). The newest few go to the holder with the
// session's metadata (Session.setHeldMeta), so they survive the agent.
//
// Reattach uses a checkpoint only when the ring no longer holds the first byte,
// and only one whose earlier blocks the recording has (Recorded): blocks before it
// come from the recording's index, the replay rebuilds the rest exactly as the
// live session built them.

import (
	"slices"
	"time"
)

// maxCheckpoints is how many checkpoints a session keeps (newest last).
const maxCheckpoints = 4

// maxCheckpointCommand bounds the running block's command kept in a checkpoint.
const maxCheckpointCommand = 1 << 10

// checkpoint is the session at one point of the holder's raw output.
type checkpoint struct {
	Raw    int64  `json:"raw"`    // the holder's offset (raw output, marks included)
	Off    int64  `json:"off"`    // the session's offset there
	Seq    uint64 `json:"seq"`    // the last event's number
	Blocks int    `json:"blocks"` // blocks so far (Cur is the last when set)
	// Cur is the running block (its C mark came, its D has not).
	Cur          *checkpointBlock `json:"cur,omitempty"`
	AtPrompt     bool             `json:"at_prompt,omitempty"`
	InputOff     int64            `json:"input_off,omitempty"`
	Cwd          string           `json:"cwd,omitempty"`
	LastExit     *int             `json:"last_exit,omitempty"`
	ShellStatus  *int             `json:"shell_status,omitempty"`
	LastReprompt int              `json:"last_reprompt,omitempty"`
	Paste        bool             `json:"paste,omitempty"`
	Alt          bool             `json:"alt,omitempty"` // the alternate screen is on
}

// checkpointBlock is a running block in a checkpoint.
type checkpointBlock struct {
	N         int       `json:"n"`
	Command   string    `json:"command"`
	Cwd       string    `json:"cwd"`
	StartedAt time.Time `json:"started_at"`
	Start     int64     `json:"start"`
}

// Recorded is what the previous agent's recording knows of a session: Reattach
// begins its replay at a checkpoint only when the recording has everything before
// it.
type Recorded struct {
	// Blocks are the recording's blocks: finished ones (State BlockDone) with
	// everything the index keeps, and started ones (N and Command). A rebuilt block
	// takes their command, cwd and times (the replay sees the echo, not what was
	// submitted).
	Blocks []Block
	// End is the output offset the recording ends at: a checkpoint later than it
	// would leave a gap in the recording.
	End int64
}

// quiescentLocked reports whether the session's state is all a checkpoint keeps.
func (s *Session) quiescentLocked() bool {
	return s.integrated && s.seenPrompt && !s.lost && !s.exited && !s.closed &&
		(s.redact == nil || s.redact.Held() == 0) &&
		s.pending == nil && s.fallback == nil && s.denied == nil && s.guarding == 0 && !s.guardAwait &&
		(s.cur == nil && s.atPrompt || s.cur != nil && !s.cur.prompted && s.cur.State == BlockRunning && !s.atPrompt)
}

// checkpointEvery is how much raw output comes between checkpoints.
func (s *Session) checkpointEvery() int64 { return int64(s.ring.Size() / 4) }

// checkpointLocked notes a checkpoint at raw, the holder's offset of the output
// ingested so far, if the state allows, and reports whether it did; the read loop
// calls it after a chunk once one is due. It hands the metadata to the holder off
// the read loop.
func (s *Session) checkpointLocked(raw int64) bool {
	// Nor while the scanner drops the rest of an overlong mark: a replay from
	// here would take that rest for output.
	if !s.quiescentLocked() || s.scanner.skip {
		return false
	}
	// What the mark scanner holds back (the start of what may be a mark) has no
	// offset yet: the replay begins with it and scans it again. (A program can
	// end every write with such a start: checkpoints are taken all the same.)
	c := checkpoint{Raw: raw - int64(len(s.scanner.pend)), Off: s.ring.End(), Seq: s.eventSeq, Blocks: len(s.blocks), AtPrompt: s.atPrompt,
		InputOff: s.inputOff, Cwd: s.cwd, LastExit: s.lastExit, ShellStatus: s.shellStatus,
		LastReprompt: s.lastReprompt, Paste: s.paste, Alt: s.altOnLocked()}
	if b := s.cur; b != nil {
		c.Cur = &checkpointBlock{N: b.N, Command: truncateCommand(b.Command), Cwd: b.Cwd, StartedAt: b.StartedAt, Start: b.Start}
	}
	if len(s.ckpts) == maxCheckpoints {
		s.ckpts = slices.Delete(s.ckpts, 0, 1)
	}
	s.ckpts = append(s.ckpts, c)
	s.sendMetaLocked()
	return true
}

// sendMetaLocked has the session's metadata (with the checkpoints) sent to the
// holder by a goroutine of its own, started when there is something to send and
// ending when nothing is left: the read loop never waits for the holder.
func (s *Session) sendMetaLocked() {
	s.metaDirty = true
	if s.metaSending || s.closed {
		return
	}
	s.metaSending = true
	s.wg.Add(1)
	go s.metaSender()
}

func (s *Session) metaSender() {
	defer s.wg.Done()
	for {
		s.metaMu.Lock() // sends go in the order their metadata was taken
		s.mu.Lock()
		if !s.metaDirty {
			s.metaSending = false
			s.mu.Unlock()
			s.metaMu.Unlock()
			return
		}
		s.metaDirty = false
		meta := s.heldMetaLocked()
		s.mu.Unlock()
		s.putHeldMeta(meta)
		s.metaMu.Unlock()
	}
}

// altOnLocked reports whether the alternate screen is on.
func (s *Session) altOnLocked() bool {
	return len(s.alt) > 0 && s.alt[len(s.alt)-1].on
}

// truncateCommand cuts a command to maxCheckpointCommand bytes (on a rune boundary).
func truncateCommand(c string) string {
	if len(c) <= maxCheckpointCommand {
		return c
	}
	n := maxCheckpointCommand
	for n > 0 && c[n]&0xC0 == 0x80 {
		n--
	}
	return c[:n]
}

// pickCheckpoint returns the newest checkpoint a replay can begin at: still in the
// holder's ring (at or after start), not after the recording's end, and with every
// earlier block finished in the recording. nil: none.
func pickCheckpoint(cs []checkpoint, start int64, rec Recorded) *checkpoint {
	done := make(map[int]bool, len(rec.Blocks))
	for _, b := range rec.Blocks {
		if b.State == BlockDone {
			done[b.N] = true
		}
	}
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		if c.Raw < start || c.Off > rec.End || c.Off < 0 || c.Blocks < 0 || c.Cur != nil && c.Cur.N != c.Blocks {
			continue
		}
		ok := true
		for n := 1; n <= c.Blocks && ok; n++ {
			ok = done[n] || c.Cur != nil && n == c.Cur.N
		}
		if ok {
			return &c
		}
	}
	return nil
}

// restoreLocked puts the session in the state of checkpoint c, its earlier blocks
// from the recording (pickCheckpoint checked they are all there).
func (s *Session) restoreLocked(c *checkpoint, rec Recorded) {
	byN := make(map[int]Block, len(rec.Blocks))
	for _, b := range rec.Blocks {
		if b.State == BlockDone {
			byN[b.N] = b
		}
	}
	s.blocks = make([]*Block, 0, c.Blocks)
	for n := 1; n <= c.Blocks; n++ {
		if c.Cur != nil && n == c.Cur.N {
			b := &Block{N: n, Command: c.Cur.Command, Cwd: c.Cur.Cwd, State: BlockRunning, StartedAt: c.Cur.StartedAt,
				Start: c.Cur.Start, End: c.Off}
			s.blocks = append(s.blocks, b)
			s.cur = b
			continue
		}
		b := byN[n]
		if b.ExitCode != nil {
			v := *b.ExitCode
			b.ExitCode = &v
		}
		s.blocks = append(s.blocks, &b)
	}
	s.eventSeq = c.Seq
	s.seenPrompt, s.integRemoved = true, true
	s.atPrompt, s.inputOff, s.cwd = c.AtPrompt, c.InputOff, c.Cwd
	s.lastExit, s.shellStatus, s.lastReprompt, s.paste = c.LastExit, c.ShellStatus, c.LastReprompt, c.Paste
	if c.Alt {
		s.alt = []altToggle{{off: c.Off, on: true}}
	}
	s.ckpts = []checkpoint{*c}
}
