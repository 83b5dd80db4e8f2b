package session

import (
	"time"
)

// Redaction (DESIGN.md "Guardrails"): secrets are replaced in the output before it
// gets offsets. The read loop passes every run of plain output through the
// session's Redactor on its way into the scrollback ring, so the ring, and all that
// is read from it (viewers: the node's stream and recording; Read; blocks; the
// screen), sees the same redacted bytes at the same offsets; the unredacted bytes
// never get an offset. A shell mark ends the redactor's stream (Flush) before it
// takes its offset, so a block covers exactly its redacted bytes; a secret is never
// cut by a mark, which the shell writes only between prompts and commands.
//
// A redactor holds back a tail that may still become a secret ("AKIA" at the end of
// a write). Those bytes are released, redacted as far as they go, once the output
// has been quiet for RedactQuiet, by the poller, and at the end of the output. So a
// secret printed in two writes further apart than RedactQuiet (a program that
// sleeps between its halves, or a person typing it slowly into an echoing terminal)
// is not redacted: a documented limit.
//
// Command text the session keeps (a block's command, the argv it shows) is redacted
// with Redactor.Text.

// RedactQuiet is how long the output must be quiet before the bytes a redactor
// holds back are released. It is below DefaultSettle, so a command typed into a
// program without integration does not end with bytes of its output held back.
const RedactQuiet = 100 * time.Millisecond

// Redactor replaces secrets in a stream (policy.Redactor is one). The session calls
// it with its mutex held, from one goroutine at a time.
type Redactor interface {
	// Write takes the next bytes of the stream and returns those that may be
	// released, redacted; it holds back a tail that may still become a secret. The
	// result is valid until the next call.
	Write(p []byte) []byte
	// Flush ends the stream: it returns the held-back bytes, redacted, and starts
	// a new stream.
	Flush() []byte
	// Held is how many bytes Write holds back now.
	Held() int
	// Text redacts a whole text (a command line) as a stream of its own, leaving
	// the stream as it is.
	Text(s string) string
}

// SetRedactor sets the redactor of the output from now on; nil redacts nothing.
// The bytes the previous one holds back are released first, redacted by it. Output
// already in the scrollback is not changed (its offsets are given).
func (s *Session) SetRedactor(r Redactor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushRedactLocked()
	s.redact = r
}

// outputLocked appends plain output to the ring through the redactor.
func (s *Session) outputLocked(p []byte) {
	if s.redact != nil {
		p = s.redact.Write(p)
	}
	s.ring.Write(p)
}

// flushRedactLocked releases what the redactor holds back into the ring and wakes
// those waiting for output.
func (s *Session) flushRedactLocked() {
	if s.redact == nil || s.redact.Held() == 0 {
		return
	}
	if b := s.redact.Flush(); len(b) > 0 {
		s.ring.Write(b)
		s.broadcastOutputLocked()
	}
}

// armReleaseLocked makes sure the poller will release held-back bytes after a quiet
// spell (the read loop calls it after each chunk). It signals the poller once per
// spell, not per chunk.
func (s *Session) armReleaseLocked() {
	if s.redact == nil || s.releaseArmed || s.redact.Held() == 0 {
		return
	}
	s.releaseArmed = true
	s.setReleaseLocked(RedactQuiet)
}

// setReleaseLocked sets the release timer to d from now, counted in Session.wg
// until its step ends (see sampler). A step that fired and has not started yet
// looks at the session as it is when it runs: it needs no new setting.
func (s *Session) setReleaseLocked(d time.Duration) {
	p := &s.poll
	if p.relArmed {
		if p.release.Stop() {
			p.release.Reset(d)
		}
		return
	}
	if s.closed {
		return
	}
	s.wg.Add(1)
	p.relArmed = true
	if p.release == nil {
		p.release = time.AfterFunc(d, s.releaseStep)
	} else {
		p.release.Reset(d)
	}
}

// releaseStep runs on the release timer's goroutine.
func (s *Session) releaseStep() {
	defer s.wg.Done()
	s.mu.Lock()
	s.poll.relArmed = false
	s.mu.Unlock()
	if at := s.releaseHeld(); !at.IsZero() {
		s.mu.Lock()
		s.setReleaseLocked(time.Until(at))
		s.mu.Unlock()
	}
}

// releaseHeld is the release timer's: it releases the bytes held back once the output has
// been quiet for RedactQuiet, and otherwise returns when to look again (zero: no
// need, nothing is held).
func (s *Session) releaseHeld() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.redact == nil || s.redact.Held() == 0 {
		s.releaseArmed = false
		return time.Time{}
	}
	if at := s.lastOutput.Add(RedactQuiet); time.Now().Before(at) {
		return at
	}
	s.flushRedactLocked()
	s.releaseArmed = false
	return time.Time{}
}

// redactTextLocked redacts command text the session keeps.
func (s *Session) redactTextLocked(text string) string {
	if s.redact == nil {
		return text
	}
	return s.redact.Text(text)
}

// redactArgvLocked returns a copy of argv with each argument redacted.
func (s *Session) redactArgvLocked(argv []string) []string {
	out := append([]string(nil), argv...)
	if s.redact == nil {
		return out
	}
	for i, a := range out {
		out[i] = s.redact.Text(a)
	}
	return out
}
