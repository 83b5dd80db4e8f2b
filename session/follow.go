package session

import (
	"time"
)

// FollowDelay is how long, at most, a change reaches the session's followers late
// while a Run or WaitBlock caller waits (see Followed).
const FollowDelay = 2 * time.Millisecond

// follow is the broadcast for followers: goroutines that keep up with a session
// but answer no one waiting on it (the node's output publisher, recorder and event
// pump, through Config.Notify; the screen emulator's feeder). While a Run or WaitBlock caller waits, a
// change does not wake them at once: the wake-up is held back for FollowDelay, and
// all the changes of that span come as one. On a machine with few cores, waking
// half a dozen goroutines at a command's echo and again at its end put them (and
// the NATS and JetStream work they start) in front of the shell and of the
// goroutine that answers the caller. Guarded by Session.mu.
type follow struct {
	out   chan struct{} // closed at the next change of any kind, if taken
	taken bool          // out was handed to a follower since it was made
	note  chan struct{} // closed at the next change that is not plain output
	// pendOut and pendNote: a change happened that out and note do not show yet;
	// pendHook and pendHookNote: the same for Config.Notify.
	pendOut, pendNote, pendHook, pendHookNote bool
	// pollWake and pollOut: a kick of the poller held back (see kickPollerLocked).
	pollWake, pollOut bool
	timer             *time.Timer // releases held changes; armed while held
	armed             bool
}

func (f *follow) init() {
	f.out = make(chan struct{})
	f.note = make(chan struct{})
}

// followLocked passes a change on to the followers: at once when no caller waits
// (or the session has ended), else when FollowDelay has passed since the first
// change held back. noted is false for plain output.
func (s *Session) followLocked(noted bool) {
	f := &s.follow
	if noted {
		f.pendNote = true
	}
	if f.taken {
		f.pendOut = true
	}
	if s.cfg.Notify != nil {
		f.pendHook = true
		f.pendHookNote = f.pendHookNote || noted
	}
	if !f.pendOut && !f.pendNote && !f.pendHook {
		return
	}
	if s.holdLocked() {
		return
	}
	s.releaseFollowersLocked()
}

// holdLocked reports whether changes are held back now, and if so makes sure the
// timer that releases them is armed.
func (s *Session) holdLocked() bool {
	if s.awaited.Load() == 0 || s.exited || s.closed {
		return false
	}
	f := &s.follow
	if !f.armed {
		f.armed = true
		if f.timer == nil {
			f.timer = time.AfterFunc(FollowDelay, s.releaseFollowers)
		} else {
			f.timer.Reset(FollowDelay)
		}
	}
	return true
}

// kickPollerLocked tells the poller about a submission (wake) or output: at once,
// or with the followers while a caller waits (the poller samples a shell block
// blockGrace after it starts in any case).
func (s *Session) kickPollerLocked(wake bool) {
	if s.holdLocked() {
		if wake {
			s.follow.pollWake = true
		} else {
			s.follow.pollOut = true
		}
		return
	}
	s.kickPoller(wake)
}

// releaseFollowers runs on the timer's goroutine.
func (s *Session) releaseFollowers() {
	s.mu.Lock()
	s.follow.armed = false
	s.releaseFollowersLocked()
	s.mu.Unlock()
}

func (s *Session) releaseFollowersLocked() {
	f := &s.follow
	if f.armed {
		f.timer.Stop()
		f.armed = false
	}
	if f.pendNote {
		close(f.note)
		f.note = make(chan struct{})
		f.pendNote = false
	}
	if f.pendOut {
		close(f.out)
		f.out = make(chan struct{})
		f.pendOut, f.taken = false, false
	}
	if f.pendHook {
		noted := f.pendHookNote
		f.pendHook, f.pendHookNote = false, false
		s.cfg.Notify(noted)
	}
	if f.pollWake {
		s.kickPoller(true)
		f.pollWake = false
	}
	if f.pollOut {
		s.kickPoller(false)
		f.pollOut = false
	}
}

// Followed returns a channel closed at the session's next change that is not plain
// output (a mark, a state change, an event, the exit), as Noted, but for a follower:
// while a Run or WaitBlock caller waits, the close comes up to FollowDelay late, so
// the caller is answered before followers wake up. Take the channel before looking
// at the session, so no change is missed.
func (s *Session) Followed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.follow.note
}

// followedOutputLocked is Followed for any change, plain output included (viewers
// with a Linger).
func (s *Session) followedOutputLocked() chan struct{} {
	s.follow.taken = true
	return s.follow.out
}
