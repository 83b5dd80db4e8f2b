package controller

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// createTimeout bounds session creation (a shell starts and reaches its prompt).
const createTimeout = 20 * time.Second

func (c *Controller) listNodes(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.NodeList{Nodes: c.nodes.list()})
}

// listSessions lists sessions fleet-wide (or of ?node=), filtered by ?label=k=v
// (repeatable; matched against the session's labels over its node's labels).
// Nodes that do not answer in time are listed in "unavailable".
func (c *Controller) listSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	labels, err := api.ParseLabels(q["label"])
	if err != nil {
		c.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	out, err := c.Sessions(reqCtx(r), api.SessionFilter{Node: q.Get("node"), Labels: labels})
	c.reply(w, r, out, err)
}

// reqCtx is a request's context, naming its actor.
// (The caller that guard authenticated is in it already: principalOf names both.)
func reqCtx(r *http.Request) context.Context {
	return WithRole(WithActor(r.Context(), actor(r)), callerOf(r.Context()).role)
}

// sessionsOf lists the sessions of nodes in parallel. With strict, the one node's
// error is returned; otherwise nodes that fail are listed as unavailable.
func (c *Controller) sessionsOf(ctx context.Context, who principal, names []string, strict bool) (api.SessionList, error) {
	type res struct {
		list api.SessionList
		err  error
	}
	results := make([]res, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() { // owned by this call: joined below
			defer wg.Done()
			results[i].err = c.call(ctx, who, n, "list", struct{}{}, &results[i].list, min(c.cfg.RequestTimeout, 2*time.Second))
		}()
	}
	wg.Wait()
	out := api.SessionList{Sessions: []api.Session{}}
	for i, r := range results {
		if r.err != nil {
			if strict {
				return api.SessionList{}, r.err
			}
			if ctx.Err() != nil {
				return api.SessionList{}, ctx.Err()
			}
			out.Unavailable = append(out.Unavailable, names[i])
			continue
		}
		out.Sessions = append(out.Sessions, r.list.Sessions...)
	}
	slices.SortFunc(out.Sessions, func(a, b api.Session) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return idOrder(a.ID, b.ID)
	})
	return out, nil
}

// idOrder orders session ids s1 < s2 < s10.
func idOrder(a, b string) int {
	na, ea := strconv.Atoi(strings.TrimPrefix(a, "s"))
	nb, eb := strconv.Atoi(strings.TrimPrefix(b, "s"))
	if ea == nil && eb == nil {
		return na - nb
	}
	return strings.Compare(a, b)
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func (c *Controller) createSession(w http.ResponseWriter, r *http.Request) {
	var body api.NewSession
	if err := decodeBody(w, r, &body); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	s, err := c.NewSession(reqCtx(r), body)
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+s.Node+"/"+s.ID)
	writeJSON(w, http.StatusCreated, s)
}

// create creates a session on body.Node, or on the node pick chooses.
func (c *Controller) create(ctx context.Context, who principal, body api.NewSession) (api.Session, error) {
	node := body.Node
	if node == "" {
		var ok bool
		if node, ok = c.nodes.pick(); !ok {
			return api.Session{}, api.Errorf(api.CodeUnavailable, "no alive node to create a session on")
		}
	}
	var s api.Session
	err := c.call(ctx, who, node, "create", body.CreateRequest, &s, createTimeout)
	return s, err
}

// withBody decodes the body into b, then calls fn with the session and a context.
func withBody[B any](c *Controller, w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, node, id string, b B) (any, error)) {
	var b B
	if err := decodeBody(w, r, &b); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	withTarget(c, w, r, func(ctx context.Context, node, id string) (any, error) { return fn(ctx, node, id, b) })
}

// withTarget validates {node}/{id} and replies with what fn returns.
func withTarget(c *Controller, w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, node, id string) (any, error)) {
	node, id, err := target(r)
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	out, err := fn(reqCtx(r), node, id)
	c.reply(w, r, out, err)
}

func (c *Controller) getSession(w http.ResponseWriter, r *http.Request) {
	withTarget(c, w, r, func(ctx context.Context, node, id string) (any, error) { return c.Session(ctx, node, id) })
}

func (c *Controller) deleteSession(w http.ResponseWriter, r *http.Request) {
	withTarget(c, w, r, func(ctx context.Context, node, id string) (any, error) { return c.CloseSession(ctx, node, id) })
}

func (c *Controller) patchSession(w http.ResponseWriter, r *http.Request) {
	withBody(c, w, r, func(ctx context.Context, node, id string, p api.SessionPatch) (any, error) {
		return c.UpdateSession(ctx, node, id, p)
	})
}

func (c *Controller) input(w http.ResponseWriter, r *http.Request) {
	withBody(c, w, r, func(ctx context.Context, node, id string, b api.InputBody) (any, error) {
		return api.Empty{}, c.Input(ctx, node, id, b.Data)
	})
}

func (c *Controller) keys(w http.ResponseWriter, r *http.Request) {
	withBody(c, w, r, func(ctx context.Context, node, id string, b api.KeysBody) (any, error) {
		return api.Empty{}, c.Keys(ctx, node, id, b.Keys...)
	})
}

func (c *Controller) takeOver(w http.ResponseWriter, r *http.Request) {
	withTarget(c, w, r, func(ctx context.Context, node, id string) (any, error) { return c.TakeOver(ctx, node, id) })
}

func (c *Controller) resize(w http.ResponseWriter, r *http.Request) {
	withBody(c, w, r, func(ctx context.Context, node, id string, b api.ResizeBody) (any, error) {
		return c.Resize(ctx, node, id, b.Cols, b.Rows)
	})
}

func (c *Controller) runCommand(w http.ResponseWriter, r *http.Request) {
	withBody(c, w, r, func(ctx context.Context, node, id string, b api.RunBody) (any, error) {
		return c.runRaw(ctx, node, id, b)
	})
}

func (c *Controller) screen(w http.ResponseWriter, r *http.Request) {
	withTarget(c, w, r, func(ctx context.Context, node, id string) (any, error) { return c.Screen(ctx, node, id) })
}

func (c *Controller) blocks(w http.ResponseWriter, r *http.Request) {
	withTarget(c, w, r, func(ctx context.Context, node, id string) (any, error) { return c.Blocks(ctx, node, id) })
}

func (c *Controller) block(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		c.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "block number %q: want 1, 2, …", r.PathValue("n")))
		return
	}
	var q [3]int64
	for i, name := range []string{"offset", "limit", "max_bytes"} {
		if name == "max_bytes" && r.URL.Query().Get(name) == "-1" {
			q[i] = -1 // unlimited, as in run's max_output_bytes
			continue
		}
		if q[i], err = queryInt(r, name); err != nil {
			c.reply(w, r, nil, err)
			return
		}
	}
	bq := api.BlockQuery{Offset: int(q[0]), Limit: int(q[1]), MaxBytes: int(q[2]), Grep: r.URL.Query().Get("grep")}
	withTarget(c, w, r, func(ctx context.Context, node, id string) (any, error) { return c.Block(ctx, node, id, n, bq) })
}

func checkCommand(cmd string) error {
	switch {
	case strings.TrimSpace(cmd) == "":
		return api.Errorf(api.CodeBadRequest, "empty command")
	case len(cmd) > api.MaxCommandBytes:
		return api.Errorf(api.CodeTooLarge, "command of %d bytes (limit %d)", len(cmd), api.MaxCommandBytes)
	}
	return nil
}

// wait waits on the node for ?until= and replies with the session and its last
// block (with its text).
func (c *Controller) wait(w http.ResponseWriter, r *http.Request) {
	var q [2]int64
	for i, name := range []string{"timeout_ms", "after"} {
		var err error
		if q[i], err = queryInt(r, name); err != nil {
			c.reply(w, r, nil, err)
			return
		}
	}
	tms := int(min(q[0], int64(api.MaxWait/time.Millisecond)))
	withTarget(c, w, r, func(ctx context.Context, node, id string) (any, error) {
		return c.Wait(ctx, node, id, api.WaitQuery{Until: r.URL.Query().Get("until"), After: q[1], TimeoutMS: tms})
	})
}

func (c *Controller) health(w http.ResponseWriter, r *http.Request) {
	by, _ := c.nodes.counts()
	h := api.Health{Status: "ok", NATS: c.cfg.Bus.Connected(), Nodes: by[api.NodeAlive]}
	code := http.StatusOK
	if !h.NATS {
		h.Status, code = "degraded", http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}
