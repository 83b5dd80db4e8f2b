package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// leaseKind is how a writer holds a session's lease.
type leaseKind int

const (
	leaseNone     leaseKind = iota
	leaseTyping             // input or keys: until a WriterLease past the last one
	leaseAttach             // a person typing in an attach: likewise
	leaseRun                // a run: until its block ends
	leaseTakeOver           // taken over: like typing
)

// lease is a session's writer lease (DESIGN "Guardrails"): one writer at a time.
// It never blocks; a writer that finds it held by another gets CodeBusy naming
// the holder. It is checked lazily: nothing runs when it lapses.
type lease struct {
	ttl time.Duration // WriterLease: how long typing holds it

	mu     sync.Mutex // guards the fields below
	holder Writer     // the last writer to hold it (kept after it lapses: the shell hook's writer)
	held   bool       // some writer has held it
	kind   leaseKind
	until  time.Time // typing kinds: it lapses then
	runs   int       // leaseRun: runs of holder in flight (typing or waiting for their block)
	block  int       // leaseRun with no run in flight: it lapses when this block is done
}

// heldByOtherLocked reports whether a writer other than w would find the lease
// held now. blockDone reports whether block n has ended.
func (l *lease) heldByOtherLocked(w Writer, now time.Time, blockDone func(int) bool) bool {
	if !l.held || l.holder == w {
		return false
	}
	switch l.kind {
	case leaseRun:
		if l.runs > 0 {
			return true
		}
		return l.block > 0 && !blockDone(l.block)
	case leaseTyping, leaseAttach, leaseTakeOver:
		return now.Before(l.until)
	}
	return false
}

// busyLocked is the CodeBusy error a writer gets while another holds the lease.
func (l *lease) busyLocked(addr string) *api.Error {
	var doing string
	switch l.kind {
	case leaseRun:
		doing = "is running a command"
		if l.runs == 0 && l.block > 0 {
			doing = fmt.Sprintf("is running a command (block %d)", l.block)
		}
		doing += "; retry when its block ends"
	case leaseAttach:
		doing = fmt.Sprintf("is typing in an attach; retry once they stop (the lease lapses %s after their last keystroke)", l.ttl)
	case leaseTakeOver:
		doing = fmt.Sprintf("took it over; retry once they stop (the lease lapses %s after their last input)", l.ttl)
	default:
		doing = fmt.Sprintf("is typing into it; retry once they stop (the lease lapses %s after their last input)", l.ttl)
	}
	return api.Errorf(api.CodeBusy, "session %s is held by %s, who %s, or take it over (take_over, operator or admin)",
		addr, l.holder.Wire(false).Name(), doing)
}

// Typed gives the lease to w for a WriterLease from now (input, keys, an
// attach's keystrokes), or refuses with CodeBusy while another writer holds it. A
// writer's own run keeps holding it until its block ends.
func (s *Session) Typed(w Writer, attach bool) error {
	if err := mayWrite(w); err != nil {
		return err
	}
	l := &s.lease
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.heldByOtherLocked(w, now, s.t.BlockDone) {
		return l.busyLocked(s.addr())
	}
	if l.held && l.holder == w && l.kind == leaseRun && (l.runs > 0 || l.block > 0 && !s.t.BlockDone(l.block)) {
		return nil // answering its own run's prompt: the run still holds it
	}
	l.holder, l.held, l.runs, l.block = w, true, 0, 0
	l.kind = leaseTyping
	if attach {
		l.kind = leaseAttach
	}
	l.until = now.Add(l.ttl)
	return nil
}

// StartRun gives the lease to w for a run, or refuses with CodeBusy while another
// writer holds it. The run calls the returned done once Run returned, with the
// block it typed (0: none) and whether that block has finished: the lease is then
// held until the block ends (at once if it has ended or nothing was typed), unless
// another writer took it over meanwhile.
func (s *Session) StartRun(w Writer) (done func(block int, finished bool), err error) {
	if err := mayWrite(w); err != nil {
		return nil, err
	}
	l := &s.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.heldByOtherLocked(w, time.Now(), s.t.BlockDone) {
		return nil, l.busyLocked(s.addr())
	}
	if !l.held || l.holder != w || l.kind != leaseRun {
		l.holder, l.held, l.kind, l.runs, l.block = w, true, leaseRun, 0, 0
	}
	l.runs++
	return func(block int, finished bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.holder != w || l.kind != leaseRun {
			return // taken over while it ran
		}
		l.runs--
		if block > 0 && !finished {
			l.block = max(l.block, block) // still running: held until it ends
		}
	}, nil
}

// LeaseRetry is how often AwaitRun (and an approved input waiting for the lease)
// tries again for a lease another writer holds.
const LeaseRetry = 250 * time.Millisecond

// AwaitRun is StartRun for a run the node types on its own (an approved command):
// while another writer holds the lease it tries again every LeaseRetry, up to
// api.MaxWait or until ctx ends (then the last busy error).
func (s *Session) AwaitRun(ctx context.Context, w Writer) (done func(block int, finished bool), err error) {
	deadline := time.Now().Add(api.MaxWait)
	for {
		done, err = s.StartRun(w)
		if err == nil || !errors.Is(err, &api.Error{Code: api.CodeBusy}) || time.Now().After(deadline) {
			return done, err
		}
		t := time.NewTimer(LeaseRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// TakeOver gives the lease to w whoever holds it, and returns the writer that held
// it (nil when nobody did, or w itself).
func (s *Session) TakeOver(w Writer) (previous *api.Writer, err error) {
	if err := mayWrite(w); err != nil {
		return nil, err
	}
	l := &s.lease
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.heldByOtherLocked(w, now, s.t.BlockDone) {
		previous = l.holder.Wire(l.kind == leaseAttach)
	}
	l.holder, l.held, l.kind, l.runs, l.block = w, true, leaseTakeOver, 0, 0
	l.until = now.Add(l.ttl)
	return previous, nil
}

// LastWriter is the writer that holds the session's writer lease, or held it last
// (zero when nobody has written yet).
func (s *Session) LastWriter() Writer {
	s.lease.mu.Lock()
	defer s.lease.mu.Unlock()
	return s.lease.holder
}

// StillHolds refuses (CodeBusy) a writer that no longer holds the lease it took
// for a run: another writer took it over meanwhile.
func (s *Session) StillHolds(w Writer) error {
	l := &s.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder != w {
		return l.busyLocked(s.addr())
	}
	return nil
}

// mayWrite refuses a writer whose role may not write: viewers never hold a lease
// (the node's role check refuses their verbs first; this is the lease's own).
func mayWrite(w Writer) error {
	if !api.RoleAtLeast(w.Role, api.RoleOperator) {
		return api.Errorf(api.CodeForbidden, "the %s role may not write into a session", api.Printable(w.Role))
	}
	return nil
}
