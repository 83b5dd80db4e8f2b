package session

// Checkpoints: where a new agent begins the replay of a holder's ring.
//
// Reattach rebuilds a session by replaying the holder's raw output through the read
// path. The session's offsets count that output without the shell's marks (and
// after redaction), so only a replay from the first byte yields the same offsets
// and blocks, and only when nothing but the output made them: a command typed into
// a program (a fallback block: run.go) leaves no mark in the output, and output
// redacted under a policy since removed would come out unredacted, at other
// offsets. So the replay begins where the session's state is known, at a
// checkpoint, and what comes before it is the recording's: its block index gives
// the blocks, its output the scrollback (redacted as it was produced). While output
// flows, the read loop notes such points, after each block's start and end
// ("event" checkpoints, of which the newest two are kept) and each time the
// raw output has grown by a quarter of the ring since the last one (kept, for a
// ring that wraps): the holder's raw offset, the session's offset and event number
// there, and the state of the block machine (at the prompt, or running block N).
// It notes them only where that state is all there is (no redacted text held
// back, no submission, guard question or fallback block in the air; the start of a
// mark the scanner holds back is replayed). The newest few go to the holder with
// the session's metadata (Session.setHeldMeta), so they survive the agent.
//
// Reattach uses the newest checkpoint the holder's ring still holds and the
// recording covers (Recorded): blocks before it come from the recording's index,
// the replay rebuilds the rest exactly as the live session built them. Only the
// output between the checkpoint and the recording's end is derived twice (under
// the policy in force at the replay): after a block's start or end it is empty
// unless the output went on. When the ring wrapped past every checkpoint that fits
// (output while no agent read it), the replay begins at the ring's oldest byte in
// the state of the newest one (lostBase): a block running there is not lost.

import (
	"slices"
	"time"
)

// maxCheckpoints is how many kept checkpoints (not event ones) a session keeps.
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
	// Event: taken after a block's start or end (the newest two are kept).
	Event bool `json:"event,omitempty"`
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
	// Start is the oldest output offset Output can read.
	Start int64
	// Output reads [from, to) of the output as the recording has it (an error when
	// it cannot give all of it); nil: there is nothing to read. Reattach fills the
	// scrollback before its checkpoint from it: output redacted when it was
	// produced stays redacted, whatever the policy says now.
	Output func(from, to int64) ([]byte, error)
}

// quiescentLocked reports whether the session's state is all a checkpoint keeps.
func (s *Session) quiescentLocked() bool {
	if s.exited || s.closed || s.redact != nil && s.redact.Held() > 0 ||
		s.pending != nil || s.fallback != nil || s.denied != nil || s.guarding != 0 || s.guardAwait {
		return false
	}
	if !s.integrated { // a program: only commands typed into it make blocks
		return s.cur == nil
	}
	return s.seenPrompt && !s.lost &&
		(s.cur == nil && s.atPrompt || s.cur != nil && !s.cur.prompted && s.cur.State == BlockRunning && !s.atPrompt)
}

// blockCheckpointLocked notes an event checkpoint when a block started or ended
// since the last one and the state allows (updateStateLocked calls it).
func (s *Session) blockCheckpointLocked() {
	if s.hold == nil || !s.ckptWant {
		return
	}
	if s.checkpointLocked(s.rawIn, true) {
		s.ckptWant = false
	}
}

// checkpointEvery is how much raw output comes between checkpoints.
func (s *Session) checkpointEvery() int64 { return int64(s.ring.Size() / 4) }

// checkpointLocked notes a checkpoint at raw, the holder's offset of the output
// ingested so far, if the state allows, and reports whether it did; the read loop
// calls it after a chunk once one is due (event false: it is kept), and
// blockCheckpointLocked after a block's start or end (event true: see
// addCheckpoint). It hands the metadata to the holder off the read loop.
func (s *Session) checkpointLocked(raw int64, event bool) bool {
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
		LastReprompt: s.lastReprompt, Paste: s.paste, Alt: s.altOnLocked(), Event: event}
	if b := s.cur; b != nil {
		c.Cur = &checkpointBlock{N: b.N, Command: truncateCommand(b.Command), Cwd: b.Cwd, StartedAt: b.StartedAt, Start: b.Start}
	}
	s.ckpts = addCheckpoint(s.ckpts, c)
	s.sendMetaLocked()
	return true
}

// metaDelay is how long a new checkpoint waits before the metadata goes to the
// holder, so that a quick command's start and end go in one round trip (two
// JSON documents fewer per run for both processes). An agent that dies in
// between leaves the holder the checkpoint before: a new agent replays from it,
// and derives a little more output twice (see above); Detach sends what waits.
const metaDelay = 50 * time.Millisecond

// sendMetaLocked has the session's metadata (with the checkpoints) sent to the
// holder metaDelay from now, by the step of a timer (counted in Session.wg until
// it ends; stopPollLocked stops one that has not fired): the read loop never
// waits for the holder.
func (s *Session) sendMetaLocked() {
	s.metaDirty = true
	if s.metaSending || s.closed {
		return
	}
	s.metaSending = true
	s.wg.Add(1)
	if s.metaTimer == nil {
		s.metaTimer = time.AfterFunc(metaDelay, s.metaSender)
	} else {
		s.metaTimer.Reset(metaDelay)
	}
}

// metaSender sends the metadata once, and again metaDelay later when it changed
// in the meantime.
func (s *Session) metaSender() {
	defer s.wg.Done()
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
	s.mu.Lock()
	s.metaSending = false
	if s.metaDirty {
		s.sendMetaLocked()
	}
	s.mu.Unlock()
}

// stopMetaLocked stops the metadata timer if it has not fired (Close, Detach:
// Detach sends what is still dirty itself).
func (s *Session) stopMetaLocked() {
	if s.metaSending && s.metaTimer.Stop() {
		s.metaSending = false
		s.wg.Done()
	}
}

// addCheckpoint appends c to cs (oldest first) and keeps the newest
// maxCheckpoints kept ones and the newest two event ones: the newest may be ahead
// of the recording when the agent dies, the one before it hardly ever.
func addCheckpoint(cs []checkpoint, c checkpoint) []checkpoint {
	cs = append(cs, c)
	out := make([]checkpoint, 0, maxCheckpoints+2)
	kept, events := 0, 0
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].Event {
			if events == 2 {
				continue
			}
			events++
		} else {
			if kept == maxCheckpoints {
				continue
			}
			kept++
		}
		out = append(out, cs[i])
	}
	slices.Reverse(out)
	return out
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
		if c.Raw < start || c.Off > rec.End || c.Off < 0 || c.Blocks < 0 || c.Cur != nil && (c.Cur.N < 1 || c.Cur.N > c.Blocks) {
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

// lostBase is the offset a replay begins at when the holder's ring, beginning at
// raw offset oldest, no longer holds checkpoint c: the output it lost after c
// counts as output (at most its raw size), and the replay's offsets come after
// everything the recording has, so no offset names two different bytes.
func lostBase(c *checkpoint, oldest int64, rec Recorded) int64 {
	return max(c.Off+oldest-c.Raw, rec.End, c.Off)
}

// restoreLocked makes the session's scrollback of scrollback bytes and puts the
// session in the state of checkpoint c: its earlier blocks from the recording
// (pickCheckpoint checked they are all there), the scrollback before c from the
// recording's output as far as it has it (otherwise the scrollback begins at c,
// and older output is read from the recording). base < 0: the replay begins at c;
// otherwise the holder's ring lost the output after c (lostBase): the replay
// begins at base, in c's state (a running block goes on, and ends at the first end
// the replay sees), with the scrollback beginning there.
func (s *Session) restoreLocked(c *checkpoint, rec Recorded, scrollback int, base int64) {
	from := c.Off
	var prior []byte
	if base >= 0 {
		from = base
	} else if rec.Output != nil {
		want := max(c.Off-int64(scrollback), rec.Start, 0)
		b, err := rec.Output(want, c.Off)
		switch {
		case err != nil:
			s.log.Warn("the recording did not give the output before the checkpoint: the scrollback begins there", "from", want, "to", c.Off, "err", err)
		case int64(len(b)) != c.Off-want:
			s.log.Warn("the recording gave short output before the checkpoint: the scrollback begins there", "from", want, "to", c.Off, "got", len(b))
		default:
			from, prior = want, b
		}
	}
	s.initLocked(scrollback, from)
	s.fillLocked(prior)
	if s.altOnLocked() != c.Alt {
		s.alt = append(s.alt, altToggle{off: s.ring.End(), on: c.Alt})
	}
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
				Start: c.Cur.Start, End: s.ring.End()}
			s.blocks = append(s.blocks, b)
			s.cur = b
			continue
		}
		b := byN[n]
		if b.ExitCode != nil {
			v := *b.ExitCode
			b.ExitCode = &v
		}
		if b.Fallback { // its text drops the typed echo and the program's prompt
			b.echoFrom, b.prompt = b.Start, true
		}
		s.blocks = append(s.blocks, &b)
	}
	s.eventSeq = c.Seq
	s.seenPrompt, s.integRemoved = s.integrated, true
	s.atPrompt, s.inputOff, s.cwd = c.AtPrompt, c.InputOff, c.Cwd
	s.lastExit, s.shellStatus, s.lastReprompt, s.paste = c.LastExit, c.ShellStatus, c.LastReprompt, c.Paste
	s.ckpts = []checkpoint{*c}
}

// fillLocked writes output the recording has (marks taken out and redacted when
// it was produced) into the scrollback, noting its switches of the alternate
// screen as the read loop does.
func (s *Session) fillLocked(p []byte) {
	sc := newMarkScanner("")
	sc.osc133, sc.osc7 = nil, nil // no shell mark is left in recorded output
	write := func(b []byte) { s.ring.Write(b) }
	sc.scan(p, write, func(m mark) {
		if m.kind != markMode || m.mode == 2004 {
			return
		}
		if len(s.alt) >= maxAltToggles {
			s.alt = append(s.alt[:0], s.alt[len(s.alt)-maxAltToggles/2:]...)
		}
		s.alt = append(s.alt, altToggle{off: s.ring.End(), on: m.on})
	})
	sc.flush(write)
}
