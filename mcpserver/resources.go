package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The sessions as resources: fleetmux://NODE/ID/screen and
// fleetmux://NODE/ID/blocks/N, listed, read, and watched for subscribers.

// resourceRef is a parsed resource URI.
type resourceRef struct {
	node, id string
	n        int // block number; 0: the screen
}

const resourceScheme = "fleetmux://"

func (r resourceRef) uri() string {
	if r.n == 0 {
		return resourceScheme + r.node + "/" + r.id + "/screen"
	}
	return resourceScheme + r.node + "/" + r.id + "/blocks/" + strconv.Itoa(r.n)
}

// parseResource parses fleetmux://NODE/ID/screen and fleetmux://NODE/ID/blocks/N.
func parseResource(uri string) (resourceRef, error) {
	rest, ok := strings.CutPrefix(uri, resourceScheme)
	if !ok {
		return resourceRef{}, fmt.Errorf("resource %q: want fleetmux://NODE/SESSION/screen or fleetmux://NODE/SESSION/blocks/N", uri)
	}
	parts := strings.Split(rest, "/")
	var r resourceRef
	switch {
	case len(parts) == 3 && parts[2] == "screen":
	case len(parts) == 4 && parts[2] == "blocks":
		n, err := strconv.Atoi(parts[3])
		if err != nil || n < 1 || strconv.Itoa(n) != parts[3] {
			return r, fmt.Errorf("resource %q: the block number must be an integer from 1", uri)
		}
		r.n = n
	default:
		return r, fmt.Errorf("resource %q: want fleetmux://NODE/SESSION/screen or fleetmux://NODE/SESSION/blocks/N", uri)
	}
	r.node, r.id = parts[0], parts[1]
	if api.ValidName(r.node) != nil || api.ValidName(r.id) != nil {
		return r, fmt.Errorf("resource %q: bad node or session name", uri)
	}
	return r, nil
}

func (m *Server) addResources() {
	m.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "session-screen",
		Title:       "Session screen",
		URITemplate: resourceScheme + "{node}/{session}/screen",
		Description: "The current screen of a session as text, with a header line (size, cursor, alternate screen, waiting for input). Subscribe to be told when it changes.",
		MIMEType:    "text/plain",
	}, m.readResource)
	m.srv.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "session-block",
		Title:       "Session block",
		URITemplate: resourceScheme + "{node}/{session}/blocks/{n}",
		Description: "Block n (the n-th command) of a session: a header line (exit code, duration, cwd, state) then its output within the text budget. Subscribe to be told while it runs and when it ends.",
		MIMEType:    "text/plain",
	}, m.readResource)
	// resources/list lists the sessions (their screens and last blocks) as they are
	// now; the SDK lists only fixed resources.
	m.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "resources/list" {
				return m.listResources(ctx, req)
			}
			return next(ctx, method, req)
		}
	})
}

func (m *Server) listResources(ctx context.Context, req mcp.Request) (mcp.Result, error) {
	ctx, done := m.callCtx(ctx, req)
	defer done()
	list, err := m.f.Sessions(ctx, api.SessionFilter{})
	if err != nil {
		return nil, m.explain(err, "", "")
	}
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	for _, s := range list.Sessions {
		title := s.Title
		if title == "" {
			title = addr(s.Node, s.ID)
		}
		out.Resources = append(out.Resources, &mcp.Resource{
			URI: resourceRef{node: s.Node, id: s.ID}.uri(), Name: addr(s.Node, s.ID) + " screen",
			Title: title + " (screen)", Description: sessionLine(s), MIMEType: "text/plain",
		})
		if s.Blocks > 0 {
			out.Resources = append(out.Resources, &mcp.Resource{
				URI: resourceRef{node: s.Node, id: s.ID, n: s.Blocks}.uri(), Name: fmt.Sprintf("%s block %d", addr(s.Node, s.ID), s.Blocks),
				Title: fmt.Sprintf("%s (block %d)", title, s.Blocks), Description: "the last command of " + addr(s.Node, s.ID) + " and its output", MIMEType: "text/plain",
			})
		}
	}
	return out, nil
}

func (m *Server) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ctx, done := m.callCtx(ctx, req)
	defer done()
	uri := req.Params.URI
	r, err := parseResource(uri)
	if err != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	var text string
	if r.n == 0 {
		sc, err := m.f.Screen(ctx, r.node, r.id)
		if err != nil {
			return nil, m.resourceErr(uri, err, r)
		}
		text = screenView{node: r.node, id: r.id, sc: sc}.text()
	} else {
		br, err := m.f.Block(ctx, r.node, r.id, r.n, api.BlockQuery{MaxBytes: m.maxText})
		if err != nil {
			return nil, m.resourceErr(uri, err, r)
		}
		text = blockView{node: r.node, id: r.id, br: br, hasBlock: true, budget: m.maxText, now: time.Now()}.text()
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: text}}}, nil
}

func (m *Server) resourceErr(uri string, err error, r resourceRef) error {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		return mcp.ResourceNotFoundError(uri)
	}
	return m.explain(err, r.node, r.id)
}

// Subscriptions: one watcher per subscribed URI waits for the session's output on
// the Fleet and notifies the subscribers when it moves.

type watch struct {
	subs map[*mcp.ServerSession]bool
	stop context.CancelFunc
}

// maxWatches bounds the resources watched at once for subscribers (each
// watcher is a goroutine with a long poll on its session's node).
const maxWatches = 256

// watchPollMS is how long one poll of a watcher waits for output.
const watchPollMS = 25000

// notifyEvery bounds how often one resource's subscribers are notified.
const notifyEvery = 200 * time.Millisecond

func (m *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	r, err := parseResource(req.Params.URI)
	if err != nil {
		return err
	}
	ctx, done := m.callCtx(ctx, req)
	defer done()
	s, err := m.f.Session(ctx, r.node, r.id)
	if err != nil {
		return m.explain(err, r.node, r.id)
	}
	if r.n > 0 && (s.Blocks > r.n || s.Blocks == r.n && s.State == api.StateIdle) || s.State == api.StateExited {
		return nil // it will not change: nothing to watch
	}
	uri := r.uri()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("the server is shutting down")
	}
	w := m.watches[uri]
	if w == nil && len(m.watches) >= maxWatches {
		return fmt.Errorf("too many resource subscriptions (%d): unsubscribe from some first", maxWatches)
	}
	if w == nil {
		wctx, stop := context.WithCancel(m.ctx)
		// The watch lives on m's context and acts as its first subscriber.
		if m.opts.WithActor != nil {
			wctx = m.opts.WithActor(wctx, actorOf(ctx))
		}
		if m.opts.WithCaller != nil {
			who := callOf(ctx)
			wctx = m.opts.WithCaller(wctx, who.principal, who.role)
		}
		w = &watch{subs: map[*mcp.ServerSession]bool{}, stop: stop}
		m.watches[uri] = w
		m.watchers.Add(1)
		go m.watch(wctx, r, w, s.OutputOffset) // owned by m: close waits for it
	}
	w.subs[req.Session] = true
	return nil
}

func (m *Server) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	r, err := parseResource(req.Params.URI)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.watches[r.uri()]; w != nil {
		delete(w.subs, req.Session)
		if len(w.subs) == 0 {
			w.stop()
			delete(m.watches, r.uri())
		}
	}
	return nil
}

// subscribed drops the subscribers of w that have left and says whether any remain.
func (m *Server) subscribed(w *watch) bool {
	live := map[*mcp.ServerSession]bool{}
	for ss := range m.srv.Sessions() {
		live[ss] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ss := range w.subs {
		if !live[ss] {
			delete(w.subs, ss)
		}
	}
	return len(w.subs) > 0
}

// watch notifies r's subscribers when the session's output moves past after, until
// they all leave, the session exits or is gone, or (a block) the block is done.
func (m *Server) watch(ctx context.Context, r resourceRef, w *watch, after int64) {
	defer m.watchers.Done()
	uri := r.uri()
	defer func() {
		m.mu.Lock()
		if m.watches[uri] == w {
			delete(m.watches, uri)
		}
		m.mu.Unlock()
		w.stop()
	}()
	notify := func() {
		if err := m.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
			m.log.Debug("mcp resource update", "uri", uri, "err", err)
		}
	}
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil && m.subscribed(w) {
		wr, err := m.f.Wait(ctx, r.node, r.id, api.WaitQuery{Until: api.UntilOutput, After: after, TimeoutMS: watchPollMS})
		if err != nil {
			if gone(err) {
				notify()
				return
			}
			if !pause(time.Second) {
				return
			}
			continue
		}
		s := wr.Session
		if s.OutputOffset > after {
			after = s.OutputOffset
			notify()
		}
		if s.State == api.StateExited || r.n > 0 && s.Blocks > r.n {
			return // nothing more will change
		}
		if r.n > 0 && s.Blocks == r.n && s.State == api.StateIdle {
			return // the block is done and the shell back at its prompt
		}
		if !pause(notifyEvery) {
			return
		}
	}
}

// gone says whether err means the session will never change again.
func gone(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && (ae.Code == api.CodeNotFound || ae.Code == api.CodeExited || ae.Code == api.CodeBadRequest)
}
