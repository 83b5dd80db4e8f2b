package controller

import (
	"context"
	"maps"
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
	labels, err := parseLabels(q["label"])
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	var names []string
	if node := q.Get("node"); node != "" {
		if err := api.ValidName(node); err != nil {
			c.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "node: %v", err))
			return
		}
		names = []string{node}
	} else {
		names = c.nodes.selectNodes(nil)
	}
	out, err := c.sessionsOf(r.Context(), actor(r), names, len(names) == 1 && q.Get("node") != "")
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	if len(labels) > 0 {
		nodeLabels := map[string]map[string]string{}
		for _, n := range c.nodes.list() {
			nodeLabels[n.Name] = n.Labels
		}
		kept := out.Sessions[:0]
		for _, s := range out.Sessions {
			all := maps.Clone(nodeLabels[s.Node])
			if all == nil {
				all = map[string]string{}
			}
			maps.Copy(all, s.Labels)
			if matches(all, labels) {
				kept = append(kept, s)
			}
		}
		out.Sessions = kept
	}
	writeJSON(w, http.StatusOK, out)
}

// sessionsOf lists the sessions of nodes in parallel. With strict, the one node's
// error is returned; otherwise nodes that fail are listed as unavailable.
func (c *Controller) sessionsOf(ctx context.Context, who string, names []string, strict bool) (api.SessionList, error) {
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

// parseLabels parses k=v pairs.
func parseLabels(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || api.ValidName(k) != nil {
			return nil, api.Errorf(api.CodeBadRequest, "label %q: want k=v with k of A-Z a-z 0-9 _ -", kv)
		}
		out[k] = v
	}
	return out, nil
}

func (c *Controller) createSession(w http.ResponseWriter, r *http.Request) {
	var body api.NewSession
	if err := decodeBody(w, r, &body); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	s, err := c.create(r.Context(), actor(r), body)
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+s.Node+"/"+s.ID)
	writeJSON(w, http.StatusCreated, s)
}

// create creates a session on body.Node, or on the node pick chooses.
func (c *Controller) create(ctx context.Context, who string, body api.NewSession) (api.Session, error) {
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

func (c *Controller) getSession(w http.ResponseWriter, r *http.Request) {
	c.sessionVerb(w, r, "get", nil, new(api.Session))
}

func (c *Controller) deleteSession(w http.ResponseWriter, r *http.Request) {
	c.sessionVerb(w, r, "close", nil, new(api.Session))
}

func (c *Controller) patchSession(w http.ResponseWriter, r *http.Request) {
	var p api.SessionPatch
	if err := decodeBody(w, r, &p); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	c.sessionVerb(w, r, "update", func(id string) any {
		return api.UpdateRequest{Session: id, Title: p.Title, Description: p.Description, Labels: p.Labels}
	}, new(api.Session))
}

func (c *Controller) input(w http.ResponseWriter, r *http.Request) {
	var b api.InputBody
	if err := decodeBody(w, r, &b); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	c.sessionVerb(w, r, "input", func(id string) any { return api.InputRequest{Session: id, Data: b.Data} }, new(api.Empty))
}

func (c *Controller) keys(w http.ResponseWriter, r *http.Request) {
	var b api.KeysBody
	if err := decodeBody(w, r, &b); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	c.sessionVerb(w, r, "keys", func(id string) any { return api.KeysRequest{Session: id, Keys: b.Keys} }, new(api.Empty))
}

func (c *Controller) resize(w http.ResponseWriter, r *http.Request) {
	var b api.ResizeBody
	if err := decodeBody(w, r, &b); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	c.sessionVerb(w, r, "resize", func(id string) any { return api.ResizeRequest{Session: id, Cols: b.Cols, Rows: b.Rows} }, new(api.Session))
}

func (c *Controller) screen(w http.ResponseWriter, r *http.Request) {
	c.sessionVerb(w, r, "screen", nil, new(api.Screen))
}

func (c *Controller) blocks(w http.ResponseWriter, r *http.Request) {
	c.sessionVerb(w, r, "blocks", nil, new(api.BlockList))
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
	grep := r.URL.Query().Get("grep")
	c.sessionVerb(w, r, "block", func(id string) any {
		return api.BlockRequest{Session: id, N: n, Offset: int(q[0]), Limit: int(q[1]), MaxBytes: int(q[2]), Grep: grep}
	}, new(api.BlockResult))
}

func (c *Controller) runCommand(w http.ResponseWriter, r *http.Request) {
	var b api.RunBody
	if err := decodeBody(w, r, &b); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	if err := checkCommand(b.Command); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	node, id, err := target(r)
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	var out api.BlockResult
	err = c.call(r.Context(), actor(r), node, "run", api.RunRequest{
		Session: id, Command: b.Command, TimeoutMS: b.TimeoutMS, MaxOutputBytes: b.MaxOutputBytes, IdempotencyKey: b.IdempotencyKey,
	}, &out, c.timeoutFor(b.TimeoutMS))
	c.reply(w, r, out, err)
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
	node, id, err := target(r)
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	q := r.URL.Query()
	until := q.Get("until")
	if until == "" {
		until = "idle"
	}
	tms, err := queryInt(r, "timeout_ms")
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	after, err := queryInt(r, "after")
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	if tms > int64(maxNodeWait/time.Millisecond) {
		tms = int64(maxNodeWait / time.Millisecond)
	}
	who := actor(r)
	var wr api.WaitReply
	if err := c.call(r.Context(), who, node, "wait", api.WaitRequest{Session: id, Until: until, After: after, TimeoutMS: int(tms)}, &wr, c.timeoutFor(int(tms))); err != nil {
		c.reply(w, r, nil, err)
		return
	}
	out := api.WaitResult{OK: wr.OK, BlockResult: api.BlockResult{Session: wr.Session}}
	if wr.Session.Blocks > 0 {
		var br api.BlockResult
		if err := c.call(r.Context(), who, node, "block", api.BlockRequest{Session: id, N: wr.Session.Blocks}, &br, c.cfg.RequestTimeout); err != nil {
			c.reply(w, r, nil, err)
			return
		}
		out.Block, out.Text, out.OmittedBytes, out.LostBytes = br.Block, br.Text, br.OmittedBytes, br.LostBytes
	}
	writeJSON(w, http.StatusOK, out)
}

// sessionVerb forwards a session route to its node verb: req builds the request
// from the session id (nil: a plain api.SessionRequest).
func (c *Controller) sessionVerb(w http.ResponseWriter, r *http.Request, verb string, req func(id string) any, out any) {
	node, id, err := target(r)
	if err != nil {
		c.reply(w, r, nil, err)
		return
	}
	var body any = api.SessionRequest{Session: id}
	if req != nil {
		body = req(id)
	}
	err = c.call(r.Context(), actor(r), node, verb, body, out, c.cfg.RequestTimeout)
	c.reply(w, r, out, err)
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
