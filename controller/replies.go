package controller

import (
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// A node's replies are believed only about that node: an enrolled node is trusted
// to run its own sessions, not to speak for the fleet. checkReply applies that to
// the sessions a reply describes, before any client sees them:
//
//   - a session whose Node is not the replying node is dropped from a list (and
//     a single-session reply that names another node is an error), with a
//     warning in the log at most once a minute per node;
//   - a session whose ID is not a valid name is dropped likewise;
//   - free text (title, description, label values, cwd, current command, shell,
//     argv) that api.ValidText refuses (multiline where a newline is legitimate:
//     description, current command, argv) is escaped whole with api.Printable, as
//     every front end prints it: a node cannot put a terminal control sequence or
//     a bidi override in front of a client; label keys that are not valid names
//     are dropped.
//
// A well-behaved node's sessions pass unchanged: it validated the text when it was
// set (api.ValidText).

// checkReply checks and cleans out, the decoded reply of node to verb.
func (c *Controller) checkReply(node, verb string, out any) error {
	switch v := out.(type) {
	case *api.SessionList:
		kept := v.Sessions[:0]
		for _, s := range v.Sessions {
			if why := foreign(node, s); why != "" {
				c.warnSpoof(node, verb, why, s)
				continue
			}
			kept = append(kept, cleanSession(s))
		}
		clear(v.Sessions[len(kept):])
		v.Sessions = kept
	case *api.Session:
		if why := foreign(node, *v); why != "" {
			c.warnSpoof(node, verb, why, *v)
			return api.Errorf(api.CodeInternal, "node %s sent a malformed %s reply", node, verb)
		}
		*v = cleanSession(*v)
	}
	return nil
}

// foreign says why s cannot be node's session ("" when it can be).
func foreign(node string, s api.Session) string {
	switch {
	case s.Node != node:
		return "a session of another node"
	case api.ValidName(s.ID) != nil:
		return "a session id that is not a name"
	}
	return ""
}

func (c *Controller) warnSpoof(node, verb, why string, s api.Session) {
	if c.spoofs.allow(node, time.Now()) {
		c.log.Warn("node reply dropped: "+why, "node", node, "verb", verb,
			"claimed_node", api.Printable(truncText(s.Node)), "session", api.Printable(truncText(s.ID)))
	}
}

// cleanSession returns s with its free text made printable and its bad label
// keys dropped.
func cleanSession(s api.Session) api.Session {
	s.Title = printable(s.Title, false)
	s.Description = printable(s.Description, true)
	s.Cwd = printable(s.Cwd, false)
	s.CurrentCommand = printable(s.CurrentCommand, true)
	s.Shell = printable(s.Shell, false)
	if len(s.Argv) > 0 {
		argv := make([]string, len(s.Argv))
		for i, a := range s.Argv {
			argv[i] = printable(a, true)
		}
		s.Argv = argv
	}
	if len(s.Labels) > 0 {
		labels := make(map[string]string, len(s.Labels))
		for k, v := range s.Labels {
			if api.ValidName(k) == nil {
				labels[k] = printable(v, false)
			}
		}
		s.Labels = labels
	}
	return s
}

// printable is s when api.ValidText accepts it, else s escaped by api.Printable.
func printable(s string, multiline bool) string {
	if api.ValidText("", s, multiline) == nil {
		return s
	}
	return api.Printable(s)
}

// truncText bounds text a node chose before it goes into the log.
func truncText(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// warnLimiter allows one warning per key per period.
type warnLimiter struct {
	period time.Duration
	mu     sync.Mutex           // guards last
	last   map[string]time.Time // key → when its last warning was allowed
}

func newWarnLimiter(period time.Duration) *warnLimiter {
	return &warnLimiter{period: period, last: map[string]time.Time{}}
}

// allow reports whether a warning about key may be logged at now, and if so
// counts it. Keys are node names (bounded by the node table); entries older than
// the period are dropped when the map grows.
func (w *warnLimiter) allow(key string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.last[key]; ok && now.Sub(t) < w.period {
		return false
	}
	if len(w.last) >= 1024 {
		for k, t := range w.last {
			if now.Sub(t) >= w.period {
				delete(w.last, k)
			}
		}
	}
	w.last[key] = now
	return true
}
