package sshd

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/fleetmux/fleetmux/api"
)

// takeOverKey takes a session's writer lease over in an attach (Ctrl-T), while
// another writer holds it: keystrokes would be refused then anyway.
const takeOverKey = 0x14

// watchLease reports, on lost, each writer that took the session's writer lease
// over from this connection's person, until stop. A session whose events cannot be
// watched reports nothing (the person then learns it at their next keystroke).
func (sc *sshSession) watchLease(node, id string) (lost <-chan api.Writer, stop func()) {
	ch := make(chan api.Writer, 4)
	me := sc.id.actor()
	unwatch, err := sc.s.fleet.WatchEvents(node, id, func(ev api.SessionEvent) {
		if ev.Type != api.EventTakenOver || ev.Previous == nil || ev.Previous.Principal != me || ev.Holder == nil {
			return
		}
		select {
		case ch <- *ev.Holder:
		default: // notices pile up: one is enough
		}
	})
	if err != nil {
		sc.s.log.Debug("ssh attach: session events not watched", "session", node+"/"+id, "err", err)
		return ch, func() {}
	}
	return ch, unwatch
}

// leaseWriter types a person's keystrokes in an attach and keeps them told about
// the session's writer lease: refused while another writer holds it (one notice
// until typing works again), Ctrl-T then takes it over. Used by the attach's input
// goroutine only.
type leaseWriter struct {
	sc       *sshSession
	node, id string
	blocked  bool   // another writer holds the lease (a busy refusal, or we lost it)
	told     string // the last busy refusal shown while blocked ("": none)
}

// input types p, taking the lease over first when p holds takeOverKey while blocked.
func (lw *leaseWriter) input(ctx context.Context, p []byte) {
	c, w := lw.sc.s.fleet, lw.sc.ch
	if i := bytes.IndexByte(p, takeOverKey); lw.blocked && i >= 0 {
		if i > 0 {
			lw.input(ctx, p[:i])
		}
		t, err := c.TakeOver(ctx, lw.node, lw.id)
		switch {
		case err != nil && ctx.Err() == nil:
			fmt.Fprintf(w, "\r\n[fleetmux: take-over refused: %s]\r\n", userError(err))
		case err == nil && t.Previous != nil:
			fmt.Fprintf(w, "\r\n[fleetmux: you took %s/%s over from %s; your keystrokes are sent]\r\n", lw.node, lw.id, t.Previous.Name())
			lw.blocked, lw.told = false, ""
		case err == nil:
			fmt.Fprintf(w, "\r\n[fleetmux: %s/%s is yours; your keystrokes are sent]\r\n", lw.node, lw.id)
			lw.blocked, lw.told = false, ""
		}
		if p = p[i+1:]; len(p) == 0 {
			return
		}
	}
	err := c.AttachInput(ctx, lw.node, lw.id, string(p))
	switch {
	case err == nil:
		lw.blocked, lw.told = false, ""
	case ctx.Err() != nil:
	case errors.Is(err, &api.Error{Code: api.CodeBusy}):
		if msg := userError(err); !lw.blocked || msg != lw.told {
			fmt.Fprintf(w, "\r\n[fleetmux: input refused: %s; Ctrl-T takes it over, Ctrl-] detaches]\r\n", msg)
			lw.told = msg
		}
		lw.blocked = true
	default:
		fmt.Fprintf(w, "\r\n[fleetmux: input refused: %s]\r\n", userError(err))
	}
}

// lost tells the person that holder took the session over from them.
func (lw *leaseWriter) lost(holder api.Writer) {
	lw.blocked, lw.told = true, ""
	fmt.Fprintf(lw.sc.ch, "\r\n[fleetmux: %s took %s/%s over: your keystrokes are refused while they write; Ctrl-T takes it back, Ctrl-] detaches]\r\n",
		holder.Name(), lw.node, lw.id)
}
