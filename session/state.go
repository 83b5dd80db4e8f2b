package session

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Kernel state polling. The poller (sampler: a timer, no goroutine while idle) samples the foreground process group of the PTY and
// whether it is blocked reading the terminal, only while the session is not idle at a
// prompt: 5ms after input or a submission, and after output that follows a quiet
// spell, backing off to 200ms while nothing changes (also while output keeps coming:
// a flood is not sampled 200 times a second). It also ends fallback blocks
// (commands typed into programs without shell integration) once the program waits
// for input again, has consumed all typed input and its output has been quiet for
// Config.Settle.

const (
	minPoll = 5 * time.Millisecond
	maxPoll = 200 * time.Millisecond
)

// sampler is the kernel state poller's schedule, guarded by Session.mu. It is no
// goroutine of its own: a timer (time.AfterFunc) runs one step (pollStep) when a
// sample is due, and the step sets the timer again while the session is not idle,
// so a session idle at its prompt has nothing running or waiting. Each set timer is
// counted in Session.wg until its step ends, so Close waits for a step under way.
type sampler struct {
	timer    *time.Timer   // runs pollStep; made at the first set
	armed    bool          // the timer is set and its step has not started (counted in wg)
	running  bool          // a step runs now: a kick is left for it (wake, out)
	wake     bool          // input or a submission came while the step ran
	out      bool          // output came while the step ran
	interval time.Duration // the back-off: minPoll after a change, doubling to maxPoll
	last     time.Time     // when the last sample was taken
	release  *time.Timer   // runs releaseStep (redact.go); made at the first set
	relArmed bool          // release is set and its step has not started (counted in wg)
}

// kickPoller tells the sampler about input or a submission (wake: sample soon, but
// at most every minPoll) or output (after a quiet spell, a prompt printed by a
// command that now reads, sample soon; under a stream of output keep backing off).
// s.mu is held.
func (s *Session) kickPoller(wake bool) {
	p := &s.poll
	if p.running {
		if wake {
			p.wake = true
		} else {
			p.out = true
		}
		return
	}
	if wake || time.Since(p.last) >= maxPoll {
		p.interval = minPoll
	}
	if !s.setPollLocked(max(0, time.Until(p.last.Add(p.interval)))) {
		// The timer fired and its step has not started: it takes the kick.
		if wake {
			p.wake = true
		} else {
			p.out = true
		}
	}
}

// setPollLocked sets the sampler's timer to d from now (replacing an earlier
// setting). It reports false when it cannot: a step runs or is about to start.
func (s *Session) setPollLocked(d time.Duration) bool {
	p := &s.poll
	if p.running {
		return false
	}
	if p.armed {
		if !p.timer.Stop() {
			return false
		}
	} else {
		if s.closed {
			return true // Close waits for wg: nothing new
		}
		s.wg.Add(1)
		p.armed = true
	}
	if p.interval == 0 {
		p.interval = minPoll
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(d, s.pollStep)
	} else {
		p.timer.Reset(d)
	}
	return true
}

// stopPollLocked stops the timers that have not fired (Close, Detach): the
// sampler's, the redactor's release and the guard's lapse.
func (s *Session) stopPollLocked() {
	if s.guard != nil {
		s.guard.stopLapseLocked()
	}
	s.stopMetaLocked()
	p := &s.poll
	if p.armed && p.timer.Stop() {
		p.armed = false
		s.wg.Done()
	}
	if p.relArmed && p.release.Stop() {
		p.relArmed = false
		s.wg.Done()
	}
}

// pollStep is one turn of the sampler, on the timer's goroutine: a sample when one
// is due, then the timer set again for the next, unless the session is idle at its
// prompt or exited (a kick sets it again).
func (s *Session) pollStep() {
	defer s.wg.Done() // the count of the setting that ran it
	p := &s.poll
	s.mu.Lock()
	p.armed, p.running = false, true
	interval := p.interval
	s.mu.Unlock()
	next := time.Duration(-1)
	need, fb, notBefore := s.needsPoll()
	if need {
		if wait := time.Until(notBefore); wait > 0 {
			next = wait
		} else {
			s.mu.Lock()
			p.last = time.Now()
			s.mu.Unlock()
			if s.sample() || fb {
				interval = minPoll
			} else {
				interval = min(interval*2, maxPoll)
			}
			if fb {
				interval = max(minPoll, min(interval, s.cfg.Settle/4))
			}
			next = interval
		}
	}
	s.mu.Lock()
	p.running, p.interval = false, interval
	wake, out := p.wake, p.out
	p.wake, p.out = false, false
	if next >= 0 {
		s.setPollLocked(next)
	}
	if out {
		s.kickPoller(false)
	}
	if wake {
		s.kickPoller(true)
	}
	s.mu.Unlock()
}

// blockGrace is how long after a shell block starts the kernel is first sampled: the
// marks end quick commands on their own, so they never pay for reading /proc.
const blockGrace = 10 * time.Millisecond

// maxBlockGrace bounds blockGraceLocked.
const maxBlockGrace = 100 * time.Millisecond

// blockGraceLocked is how long after a shell block starts the kernel is first
// sampled: blockGrace, or as long as the block before it took (at most
// maxBlockGrace). A loaded host runs even `echo` for longer than blockGrace, and
// sampling every block of a session whose blocks all take 40 ms only makes the
// host busier; a block that turns out to wait for input is found that much later.
func (s *Session) blockGraceLocked() time.Duration {
	for i := len(s.blocks) - 1; i >= 0 && i >= len(s.blocks)-2; i-- {
		if b := s.blocks[i]; b != s.cur && b.State == BlockDone && !b.StartedAt.IsZero() {
			return min(max(b.FinishedAt.Sub(b.StartedAt), blockGrace), maxBlockGrace)
		}
	}
	return blockGrace
}

// pendingGrace is how long after a submission the kernel is first sampled while the
// command has not started (no C mark): a shell waiting for the rest of an incomplete
// line is rare and nothing hurries to learn it, while a busy host (a fan-out to many
// sessions on one node) can take longer than blockGrace to start every command, and
// sampling all of them then only makes the host busier.
const pendingGrace = 150 * time.Millisecond

// guardQuiet is how long the sampler lets a shell be while it waits for the
// guard's answer about a line.
const guardQuiet = 250 * time.Millisecond

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (s *Session) needsPoll() (need, fallback bool, notBefore time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited || s.closed {
		return false, false, time.Time{}
	}
	if s.integrated && s.fallback == nil {
		switch {
		case s.pending != nil:
			// Submitted: the C mark comes first, or the shell waits for the rest of
			// an incomplete line (`if true; then`), which pendingGrace finds.
			notBefore = s.pending.StartedAt.Add(pendingGrace)
		case s.cur != nil:
			notBefore = s.cur.StartedAt.Add(s.blockGraceLocked())
		case s.seenPrompt && !s.atPrompt && len(s.blocks) > 0:
			// Between a command's end (D) and the next prompt (A): the prompt
			// comes by itself, and a sample would only find the shell busy with its
			// prompt hooks (this is where every Run would otherwise pay for one).
			// Only a prompt without our wrapper needs one, and nothing hurries to
			// learn that: on a busy host the hooks take longer than blockGrace.
			notBefore = s.blocks[len(s.blocks)-1].FinishedAt.Add(pendingGrace)
		}
		switch {
		case s.guarding > 0 && time.Since(s.guardAsked) < guardQuiet:
			// The shell waits for the guard's answer on its guard socket, not at
			// the terminal: a sample would find nothing. The answer kicks the
			// sampler; a decision that takes long (an approval) is sampled as usual.
			notBefore = later(notBefore, s.guardAsked.Add(guardQuiet))
		case s.guarding == 0 && !s.guardAnswered.IsZero():
			// Answered: the line runs now, and gets the grace of a block's start.
			notBefore = later(notBefore, s.guardAnswered.Add(blockGrace))
		}
	}
	return s.state != StateIdle || s.fallback != nil, s.fallback != nil, notBefore
}

// forgetWaitingLocked drops the last sample's "waiting for input" when the shell
// has just been given something to do (a submitted command, the end of one): it was
// taken while the shell sat reading at its prompt, and until the next sample the
// session is running, not waiting. Samples under way are discarded too.
func (s *Session) forgetWaitingLocked() {
	s.waiting, s.waitCand = false, false
	s.waitGen++
}

// sample reads the kernel state and applies it; it reports whether anything changed
// (or a sample should follow soon).
func (s *Session) sample() bool {
	s.mu.Lock()
	gen, hooked, known := s.waitGen, s.atPrompt && !s.lost, s.image
	s.mu.Unlock()
	waiting, byShell := false, false
	if pg, err := foregroundPgrp(s.master); err == nil && pg > 0 {
		waiting, byShell = fgWaitingForInput(s.pid, pg, s.tty)
	}
	// The shell itself reads the terminal, as another program image (an exec). Only
	// looked for when our prompt mark has not come since the last command: a shell
	// that printed it has our hooks, so it is ours, and the two /proc reads stay off
	// the path of every command back to idle. An image not known (not read whole at
	// the start: see parseImage) tells nothing.
	execd := false
	if waiting && byShell && s.integrated && !hooked && known != (procImage{}) {
		img, ok := readImage(s.pid)
		execd = ok && img != known
	}
	echo, _ := terminalEcho(s.master)
	// Output the shell wrote before it blocked reading (a command's D mark and the
	// prompt) is either still in the terminal, in the read loop's hands, or ingested
	// by the time we look under s.mu: in the first two cases the sample is ahead.
	ahead := false
	if waiting {
		n, err := outputQueued(s.master)
		ahead = err != nil || n > 0 || s.inflight.Load()
	}
	s.mu.Lock()
	queued := -1
	if (s.fallback != nil || s.pending != nil || s.inputStale) && waiting {
		s.mu.Unlock()
		if n, err := inputQueued(s.tty); err == nil {
			queued = n
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if s.waitGen != gen || (s.pending != nil || s.inputStale) && queued != 0 {
		// Taken before the shell was given something to do; or the shell (or the
		// program input was typed into) has not read all of it yet: it is not
		// waiting, whatever its read call says (once it has read all of it and
		// still reads, e.g. a PS2 continuation, it is).
		waiting = false
	}
	confirm := false
	// afterHook: the shell's prompt hook ran (D or N read) and no prompt mark came
	// since. The same holds there: the prompt may be on its way, and a Run let in
	// before it would take the hook's cwd mark, on its way too, for the end of the
	// new command.
	afterHook := s.seenPrompt && !s.atPrompt && s.cur == nil && s.pending == nil && s.fallback == nil
	// A new reader is a new wait too: a program that waited (vim) quits and the
	// shell reads its line editor, with the command's D mark still on its way.
	newReader := !s.waiting || byShell && !s.waitByShell
	if waiting && newReader && s.integrated && (s.cur != nil || s.pending != nil || afterHook) {
		// The kernel can be ahead of the output we have read: the command ended,
		// the shell wrote D and its prompt and reads again, but those bytes are
		// still on their way (in the terminal's buffers, which the kernel flushes
		// to the master from a worker that a loaded machine can hold up for tens of
		// milliseconds, or in the read loop's hands). A shell block waits for input
		// only when no output is on its way and a second sample, with no output
		// read in between, agrees; when the reader is the shell itself (`read x`,
		// or the shell back at its line editor with D not read yet), only once the
		// output has been quiet for Settle as well.
		fresh := ahead || !s.waitCand || s.waitCandEnd != s.ring.End()
		if fresh {
			s.waitCand, s.waitCandEnd, s.waitCandAt = true, s.ring.End(), time.Now()
		}
		if fresh || byShell && time.Since(s.waitCandAt) < s.cfg.Settle {
			waiting, confirm = false, true
		}
	}
	if !waiting && !confirm {
		s.waitCand = false
	}
	changed := !s.polled || waiting != s.waiting || echo != s.echo
	s.polled, s.waiting, s.echo = true, waiting, echo
	s.waitByShell = waiting && byShell
	if s.inputStale && waiting {
		s.inputStale, changed = false, true // it reads again, after the input: Run may type
	}
	if execd && !s.lost {
		// `exec bash`: the shell that reads now has none of our hooks. Commands
		// typed into it are fallback blocks, and the session says why.
		s.lost, changed = true, true
		s.log.Debug("shell integration lost: the shell exec'd another program")
	}
	if waiting && byShell && !ahead && s.integrated && !s.lost && s.cur != nil && s.cur.prompted &&
		s.pending == nil && s.fallback == nil {
		// The prompt came back (A) and the shell reads at it, and no D came: the
		// hook that sends it was removed. The command is over, its code unknown.
		s.endOpenLocked(s.ring.End(), nil, NoteEndLost)
		changed = true
	}
	if waiting && byShell && !ahead && s.integrated && !s.lost && s.seenPrompt && !s.atPrompt &&
		s.cur == nil && s.pending == nil && s.fallback == nil {
		// The shell reads its terminal after its prompt hook (D or N, and the cwd)
		// with no A mark on the way: its prompt lacks our wrapper (a theme rewrote
		// it after our hook ran). It is at its prompt all the same.
		s.atPrompt, s.inputOff, changed = true, s.ring.End(), true
	}
	if fb := s.fallback; fb != nil && waiting && queued == 0 {
		quietSince := s.lastOutput
		if fb.submitted.After(quietSince) {
			quietSince = fb.submitted
		}
		if time.Since(quietSince) >= s.cfg.Settle {
			s.flushRedactLocked() // the output has settled: what is held back is the block's
			b := fb.block
			s.finishBlockLocked(b, s.ring.End(), nil, s.fallbackNoteLocked())
			s.fallback = nil
			changed = true
		}
	}
	before := s.state
	s.updateStateLocked()
	if changed || before != s.state {
		s.broadcastLocked()
		return true
	}
	return confirm // sample again soon
}

// Until names what Wait waits for; its values are api's words.
type Until string

const (
	UntilIdle         Until = api.UntilIdle         // back at the shell prompt
	UntilWaitingInput Until = api.UntilWaitingInput // the foreground program waits for input
	UntilExited       Until = api.UntilExited       // the process exited
	UntilOutput       Until = api.UntilOutput       // output beyond the given offset exists
)

// Wait blocks until the condition holds or ctx is done, and returns the session as it
// is then. Waiting for idle, waiting_input or output of a session that exits instead
// fails with ErrExited (with the final Info).
func (s *Session) Wait(ctx context.Context, until Until, after int64) (Info, error) {
	switch until {
	case UntilIdle, UntilWaitingInput, UntilExited, UntilOutput:
	default:
		return Info{}, fmt.Errorf("%w: wait until %q (want idle, waiting_input, exited or output)", ErrBadConfig, until)
	}
	for {
		s.mu.Lock()
		in := s.infoLocked()
		ok := false
		switch until {
		case UntilIdle:
			ok = s.state == StateIdle
		case UntilWaitingInput:
			ok = s.state == StateWaitingInput
		case UntilExited:
			ok = s.exited
		case UntilOutput:
			ok = s.ring.End() > after
		}
		exited, closed, ch := s.exited, s.closed, s.noted
		if until == UntilOutput {
			ch = s.changedLocked()
		}
		s.mu.Unlock()
		switch {
		case ok:
			return in, nil
		case closed:
			return in, ErrClosed
		case exited:
			return in, ErrExited
		}
		if err := waitChange(ctx, ch, 0); err != nil {
			return in, err
		}
	}
}

// Changed returns a channel that is closed at the next change of the session: new
// output, a mark, a state change, an event. Take it before looking at the session, then
// wait on it, to never miss a change.
func (s *Session) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changedLocked()
}

// Noted is Changed without new output: the channel is closed at the next mark,
// state change, event or exit (a flood of output does not wake its readers).
func (s *Session) Noted() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.noted
}

// ScrollbackBytes is the size of the session's scrollback ring.
func (s *Session) ScrollbackBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring.Size()
}
