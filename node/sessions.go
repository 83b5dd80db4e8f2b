package node

// The session verbs that make, change, list and end sessions: create (under
// the policy's sandbox), list, get, update (title, description, labels) and close.

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/replay"
	"github.com/fleetmux/fleetmux/session"
)

func (n *Node) create(ctx context.Context, req request) (any, error) {
	var r api.CreateRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	if len(r.Title) > api.MaxTitleBytes || len(r.Description) > api.MaxDescBytes {
		return nil, api.Errorf(api.CodeTooLarge, "title over %d bytes or description over %d bytes", api.MaxTitleBytes, api.MaxDescBytes)
	}
	if err := validInfo(&r.Title, &r.Description, r.Labels); err != nil {
		return nil, err
	}
	n.redactInfo(&r.Title, &r.Description, r.Labels)
	if r.Shell == "" && len(r.Argv) == 0 {
		r.Shell = n.cfg.DefaultShell
	}
	w := writerOf(req)
	if err := n.guard.Check(ctx, guard.Request{Verb: guard.VerbCreate, Writer: w, Create: &r,
		Held: &guard.Held{Writer: w, Verb: guard.VerbCreate, Create: &r}, Decision: req.decision}); err != nil {
		return nil, err
	}
	if err := n.guard.Loaded(ctx); err != nil { // the sandbox is chosen by the policy in force
		return nil, err
	}
	return n.startNew(r, w)
}

// creator creates the sessions of creates an approval held (guard.Creator).
type creator struct{ n *Node }

// CreateApproved creates the session of an approved create, as it was asked.
func (c creator) CreateApproved(ctx context.Context, h guard.Held) (string, error) {
	n := c.n
	if hs, ok := n.takeHeldSpawn(h.Create); ok {
		return n.spawnApproved(ctx, hs, *h.Create, h.Writer) // an agent's (agents.go)
	}
	s, err := n.startNew(*h.Create, h.Writer)
	if err != nil {
		return "", err
	}
	n.log.Info("held session created", "session", s.ID, "principal", h.Writer.Principal)
	return s.ID, nil
}

// startNew starts the session r asks for (checked) for w and registers it.
func (n *Node) startNew(r api.CreateRequest, w guard.Writer) (api.Session, error) {
	return n.startSandboxed(r, w, "")
}

// startSandboxed is startNew for an agent of driver ("" for none), whose
// sandbox rules may single it out, and which may use write (its own config
// directory) below the data dir every session is kept out of.
func (n *Node) startSandboxed(r api.CreateRequest, w guard.Writer, driver string, write ...string) (api.Session, error) {
	prof, err := n.sandboxFor(r, w, driver) // sandbox.go
	if err != nil {
		return api.Session{}, err
	}
	env := make([]string, 0, len(r.Env))
	for k, v := range r.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)

	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return api.Session{}, api.Errorf(api.CodeUnavailable, "node %s is shutting down", n.cfg.Name)
	}
	if len(n.sessions) >= n.cfg.MaxSessions {
		n.mu.Unlock()
		return api.Session{}, api.Errorf(api.CodeLimit, "node %s has %d sessions (limit %d): close one first", n.cfg.Name, len(n.sessions), n.cfg.MaxSessions)
	}
	n.mu.Unlock()

	red, redFrom := n.newSessionRedactor()
	var ep atomic.Pointer[entry] // the shell's guard reaches the entry once it is registered
	var shellCheck func(context.Context, string) session.GuardVerdict
	if n.cfg.Policy != nil { // without a source no policy ever comes: no checks, no cost
		shellCheck = n.shellGuard(&ep)
	}
	e := &entry{n: n} // its kick is the session's Notify from the start (a no-op until run)
	e.guard = n.guard.NewSession(e)
	if len(r.Argv) > 0 {
		e.guard.Started(w) // w's program: it may type into the session
	}
	// A session in a holder is named there at its start: its id comes first.
	var id string
	var num int
	if n.cfg.Holder != nil {
		n.mu.Lock()
		id, num, err = n.allocIDLocked()
		n.mu.Unlock()
		if err != nil {
			return api.Session{}, err
		}
	}
	s, err := startSession(session.Config{
		ID:    id,
		Shell: r.Shell, Argv: r.Argv, Dir: r.Cwd, Env: env, Cols: r.Cols, Rows: r.Rows, User: r.User,
		ScrollbackBytes: n.cfg.ScrollbackBytes, RuntimeDir: filepath.Join(n.cfg.DataDir, "run"),
		Title: r.Title, Description: r.Description, Labels: r.Labels, Logger: n.log,
		Redactor: red, Guard: shellCheck, Holder: n.cfg.Holder, Notify: e.kick,
		Sandbox: prof, Hide: n.hidden(), Write: write,
	})
	if err != nil {
		return api.Session{}, sessionErr("", err)
	}
	n.mu.Lock()
	if id == "" {
		id, num, err = n.allocIDLocked()
	}
	if err != nil || n.closed {
		n.mu.Unlock()
		s.Close()
		if err == nil {
			err = api.Errorf(api.CodeUnavailable, "node %s is shutting down", n.cfg.Name)
		}
		return api.Session{}, err
	}
	e.id, e.num, e.s, e.started, e.dir = id, num, s, time.Now(), filepath.Join(n.cfg.DataDir, "sessions", id)
	e.owner = w.Principal
	e.castTo = filepath.Join(e.dir, "output.cast")
	e.ctx, e.cancel = context.WithCancel(n.ctx)
	info := s.Info()
	if err := e.startRecording(replay.Header{
		Width: info.Cols, Height: info.Rows, Timestamp: info.CreatedAt, Title: r.Title,
		Env: map[string]string{"SHELL": info.Shell, "TERM": "xterm-256color"}, Command: strings.Join(info.Argv, " "),
	}); err != nil {
		n.mu.Unlock()
		s.Close()
		return api.Session{}, fmt.Errorf("recording of %s: %w", id, err)
	}
	e.openPublished()
	e.saveOwner()
	n.sessions[id] = e
	ep.Store(e)
	n.gossipLocked()
	n.wg.Add(1)
	n.mu.Unlock()
	n.redactStarted(e, redFrom)
	e.run() // the node's wg counts the entry until its end
	return e.info(), nil
}

func (n *Node) list(ctx context.Context, req request) (any, error) {
	n.mu.Lock()
	meta := n.metaLocked()
	n.mu.Unlock()
	return api.SessionList{Sessions: n.Sessions(), Node: &meta}, nil
}

func (n *Node) get(ctx context.Context, req request) (any, error) {
	var r api.SessionRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	return e.info(), nil
}

func (n *Node) update(ctx context.Context, req request) (any, error) {
	var r api.UpdateRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	if r.Title != nil && len(*r.Title) > api.MaxTitleBytes || r.Description != nil && len(*r.Description) > api.MaxDescBytes {
		return nil, api.Errorf(api.CodeTooLarge, "title over %d bytes or description over %d bytes", api.MaxTitleBytes, api.MaxDescBytes)
	}
	if err := validInfo(r.Title, r.Description, r.Labels); err != nil {
		return nil, err
	}
	n.redactInfo(r.Title, r.Description, r.Labels)
	e.s.SetInfo(r.Title, r.Description, r.Labels)
	return e.info(), nil
}

// validInfo checks a session's title, description and labels (nil: not given) for
// control characters: they would reach other people's terminals.
func validInfo(title, desc *string, labels map[string]string) error {
	if title != nil {
		if err := api.ValidText("title", *title, false); err != nil {
			return api.Errorf(api.CodeBadRequest, "%v", err)
		}
	}
	if desc != nil {
		if err := api.ValidText("description", *desc, true); err != nil {
			return api.Errorf(api.CodeBadRequest, "%v", err)
		}
	}
	if err := api.ValidLabels(labels); err != nil {
		return api.Errorf(api.CodeBadRequest, "%v", err)
	}
	return nil
}

// redactInfo redacts a session's title, description and label values (nil: not
// given) in place, under the policy in force with the stored secrets, as the node
// redacts command text (redactText): they are shown in lists, JSON, events and the
// recording's header. A value the markers make longer than its limit is cut to it.
// Label keys are names (api.ValidName) and stay. Redacted when they enter the node
// (create, update): a later policy version does not change them.
func (n *Node) redactInfo(title, desc *string, labels map[string]string) {
	p := n.guard.Redaction()
	if p == nil || len(p.Redacts) == 0 {
		return
	}
	red := func(s string, limit int) string {
		if s = p.RedactText(s); len(s) > limit {
			s = truncate(s, limit-len("…"))
		}
		return s
	}
	if title != nil {
		*title = red(*title, api.MaxTitleBytes)
	}
	if desc != nil {
		*desc = red(*desc, api.MaxDescBytes)
	}
	for k, v := range labels {
		labels[k] = red(v, api.MaxLabelValueBytes)
	}
}

func (n *Node) closeSession(ctx context.Context, req request) (any, error) {
	var r api.SessionRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	if err := guard.MayClose(e.owner, writerOf(req), n.cfg.Name, e.id); err != nil {
		return nil, err
	}
	info, ok := n.closeEntry(e, false)
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "no session %s/%s", n.cfg.Name, r.Session)
	}
	return info, nil
}
