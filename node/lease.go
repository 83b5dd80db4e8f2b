package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/session"
)

func (w writer) wire(attach bool) *api.Writer {
	return &api.Writer{Principal: w.Principal, Actor: w.Actor, Role: w.Role, Attach: attach}
}

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
	holder writer     // the last writer to hold it (kept after it lapses: the shell hook's writer)
	held   bool       // some writer has held it
	kind   leaseKind
	until  time.Time // typing kinds: it lapses then
	runs   int       // leaseRun: runs of holder in flight (typing or waiting for their block)
	block  int       // leaseRun with no run in flight: it lapses when this block is done
}

// state is what the lease holds now, for deciding: whether a writer other than
// w would find it held. blockDone reports whether block n has ended.
func (l *lease) heldByOtherLocked(w writer, now time.Time, blockDone func(int) bool) bool {
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
		addr, l.holder.wire(false).Name(), doing)
}

// typed gives the lease to w for a WriterLease from now (input, keys, an
// attach's keystrokes), or refuses with CodeBusy while another writer holds it. A
// writer's own run keeps holding it until its block ends.
func (e *entry) typed(w writer, attach bool) error {
	if err := mayWrite(w); err != nil {
		return err
	}
	l := &e.lease
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.heldByOtherLocked(w, now, e.blockDone) {
		return l.busyLocked(e.addr())
	}
	if l.held && l.holder == w && l.kind == leaseRun && (l.runs > 0 || l.block > 0 && !e.blockDone(l.block)) {
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

// startRun gives the lease to w for a run, or refuses with CodeBusy while another
// writer holds it. The run calls the returned done with its result once Run
// returned: the lease is then held until the run's block ends (at once if it has
// ended or nothing was typed), unless another writer took it over meanwhile.
func (e *entry) startRun(w writer) (done func(res session.Result), err error) {
	if err := mayWrite(w); err != nil {
		return nil, err
	}
	l := &e.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.heldByOtherLocked(w, time.Now(), e.blockDone) {
		return nil, l.busyLocked(e.addr())
	}
	if !l.held || l.holder != w || l.kind != leaseRun {
		l.holder, l.held, l.kind, l.runs, l.block = w, true, leaseRun, 0, 0
	}
	l.runs++
	return func(res session.Result) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.holder != w || l.kind != leaseRun {
			return // taken over while it ran
		}
		l.runs--
		if res.Block.N > 0 && res.Block.State != session.BlockDone {
			l.block = max(l.block, res.Block.N) // still running: held until it ends
		}
	}, nil
}

// leaseRetry is how often awaitRun tries again for a lease another writer holds.
const leaseRetry = 250 * time.Millisecond

// awaitRun is startRun for a run the node types on its own (an approved command):
// while another writer holds the lease it tries again every leaseRetry, up to
// api.MaxWait or until ctx ends (then the last busy error).
func (e *entry) awaitRun(ctx context.Context, w writer) (done func(session.Result), err error) {
	deadline := time.Now().Add(api.MaxWait)
	for {
		done, err = e.startRun(w)
		if err == nil || !errors.Is(err, &api.Error{Code: api.CodeBusy}) || time.Now().After(deadline) {
			return done, err
		}
		t := time.NewTimer(leaseRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// takeOver gives the lease to w whoever holds it, and returns the writer that held
// it (nil when nobody did, or w itself).
func (e *entry) takeOver(w writer) (previous *api.Writer, err error) {
	if err := mayWrite(w); err != nil {
		return nil, err
	}
	l := &e.lease
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.heldByOtherLocked(w, now, e.blockDone) {
		previous = l.holder.wire(l.kind == leaseAttach)
	}
	l.holder, l.held, l.kind, l.runs, l.block = w, true, leaseTakeOver, 0, 0
	l.until = now.Add(l.ttl)
	return previous, nil
}

// lastWriter is the writer that holds the session's writer lease, or held it last
// (zero when nobody has written yet): the writer a line an integrated shell asks
// about is decided for (whoever typed it holds the lease).
func (e *entry) lastWriter() writer {
	e.lease.mu.Lock()
	defer e.lease.mu.Unlock()
	return e.lease.holder
}

// stillHolds refuses (CodeBusy) a writer that no longer holds the lease it took
// for a run: another writer took it over meanwhile.
func (e *entry) stillHolds(w writer) error {
	l := &e.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder != w {
		return l.busyLocked(e.addr())
	}
	return nil
}

// blockDone reports whether block n of the session has ended (or is unknown).
func (e *entry) blockDone(n int) bool {
	b, err := e.s.Block(n)
	return err != nil || b.State == session.BlockDone
}

func (e *entry) addr() string { return e.n.cfg.Name + "/" + e.id }

// mayWrite refuses a writer whose role may not write: viewers never hold a lease
// (the node's role check refuses their verbs first; this is the lease's own).
func mayWrite(w writer) error {
	if !api.RoleAtLeast(w.Role, api.RoleOperator) {
		return api.Errorf(api.CodeForbidden, "the %s role may not write into a session", api.Printable(w.Role))
	}
	return nil
}

// takeOverVerb serves take_over: the caller gets the session's writer lease, and
// the writer that held it is told by an EventTakenOver on the session's event
// subject (an SSH attach shows it to the person).
func (n *Node) takeOverVerb(ctx context.Context, req request) (any, error) {
	var r api.TakeOverRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	w := writerOf(req)
	prev, err := e.takeOver(w)
	if err != nil {
		return nil, err
	}
	if prev != nil {
		publishJSON(n.cfg.Bus, n.subj.Event(n.cfg.Name, e.id), api.SessionEvent{
			Type: api.EventTakenOver, Node: n.cfg.Name, Session: e.id, Time: time.Now().UTC(),
			State: e.info().State, Holder: w.wire(false), Previous: prev,
		})
		n.log.Info("writer lease taken over", "session", e.id, "principal", w.Principal, "previous", prev.Principal)
	}
	return api.TakeOver{Session: e.info(), Previous: prev}, nil
}
