package node

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/session"
)

// Owners and reaping. A session remembers its owner: the verified principal of
// the request that created it, kept in DIR/sessions/ID/owner so a session in a
// holder keeps it across agent restarts. Its owner may close it, an admin any
// session (guard.MayClose). An exited session stays listed for Config.ReapExited
// (its reap_at says until when), then the node closes it as a close request
// would; its recording stays, under the recording retention.

// DefaultReapExited is how long an exited session stays listed by default
// (Config.ReapExited).
const DefaultReapExited = time.Hour

// ownerFile is the name of a session's owner file in its recording directory.
const ownerFile = "owner"

// maxOwnerBytes bounds the owner file read back (a principal is short).
const maxOwnerBytes = 512

// saveOwner writes e's owner to its directory (logged on failure: the session
// then has no known owner after an agent restart, and only an admin closes it).
func (e *entry) saveOwner() {
	if e.owner == "" {
		return
	}
	if err := datadir.WriteFile(filepath.Join(e.dir, ownerFile), []byte(e.owner+"\n"), 0o600); err != nil {
		e.n.log.Warn("session owner not saved", "session", e.id, "err", err)
	}
}

// loadOwner reads back the owner saveOwner wrote ("" when there is none or it is
// not a plausible principal: no control characters, bounded).
func (e *entry) loadOwner() {
	b, err := datadir.ReadFile(filepath.Join(e.dir, ownerFile))
	if err != nil {
		if !os.IsNotExist(err) {
			e.n.log.Warn("session owner unreadable", "session", e.id, "err", err)
		}
		return
	}
	s := strings.TrimSuffix(string(b), "\n")
	if len(s) > maxOwnerBytes || api.ValidText("owner", s, false) != nil {
		e.n.log.Warn("session owner file ignored: not a principal", "session", e.id)
		return
	}
	e.owner = s
}

// reapTime is when e is to be reaped (zero: it is not).
func (e *entry) reapTime() time.Time {
	if v := e.reapAt.Load(); v != 0 {
		return time.Unix(0, v).UTC()
	}
	return time.Time{}
}

// kickReaper asks the reaper to look at the sessions soon; it never blocks.
func (n *Node) kickReaper() {
	select {
	case n.reapKick <- struct{}{}:
	default:
	}
}

// reaper is the node's goroutine that closes exited sessions Config.ReapExited
// after it first saw them exited (at the latest when it is kicked: a session's
// exit event kicks it). It stops when the node's context ends (Close).
func (n *Node) reaper() {
	defer n.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := n.reap(time.Now())
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), time.Millisecond)
		}
		t.Reset(wait)
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		case <-n.reapKick:
		}
	}
}

// reap sets the reap time of sessions newly seen exited and closes those whose
// time has come; it returns the earliest reap time still ahead (zero: none).
func (n *Node) reap(now time.Time) time.Time {
	n.mu.Lock()
	entries := make([]*entry, 0, len(n.sessions))
	for _, e := range n.sessions {
		entries = append(entries, e)
	}
	n.mu.Unlock()
	var next time.Time
	for _, e := range entries {
		at := e.reapTime()
		if at.IsZero() {
			if e.s.Info().State != session.StateExited {
				continue
			}
			at = now.Add(n.cfg.ReapExited)
			e.reapAt.Store(at.UnixNano())
		}
		if now.Before(at) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		if _, ok := n.closeEntry(e, true); ok {
			n.log.Info("exited session reaped", "session", e.id, "after", n.cfg.ReapExited)
		}
	}
	return next
}

// closeEntry removes e from the node and closes it, publishing its closed event;
// it returns e's last state, or false when e was no longer the node's (closed
// already) or, for the reaper (reaping), when the node is closing: Close then
// detaches or closes every session itself.
func (n *Node) closeEntry(e *entry, reaping bool) (api.Session, bool) {
	n.mu.Lock()
	if n.sessions[e.id] != e || reaping && n.closed {
		n.mu.Unlock()
		return api.Session{}, false
	}
	delete(n.sessions, e.id)
	n.gossipLocked()
	n.mu.Unlock()
	n.agents.Remove(e.id) // an agent's sampler ends before its session
	info := e.info()
	e.close()
	n.stopHooks(e.id) // once its program is gone: it writes into its config dir
	publishJSON(n.cfg.Bus, n.subj.Event(n.cfg.Name, e.id), api.SessionEvent{
		Type: api.EventClosed, Node: n.cfg.Name, Session: e.id, Time: time.Now().UTC(), State: api.StateExited,
	})
	info.State, info.ReapAt = api.StateExited, nil
	return info, true
}
