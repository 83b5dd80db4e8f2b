package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// What the front doors (HTTP API, SSH, MCP) do with the fleet: the controller's
// methods below route to the nodes. Who acts comes from the context (WithActor,
// WithRole): it is signed into every node request, goes into the nodes' audit
// records, and the nodes check the role. Errors are *api.Error where the user
// should see them.

type actorKey struct{}

// WithActor returns a context that names who acts (an SSH key fingerprint, an
// MCP client, "api@addr"); requests made with it carry it to the nodes' audit.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

func actorOf(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

type roleKey struct{}

// WithRole returns a context that carries the acting principal's role (an SSH
// key's, an API token's): the nodes check every request's verb against it. A
// request made with a context that carries no role is refused.
func WithRole(ctx context.Context, role string) context.Context {
	return context.WithValue(ctx, roleKey{}, role)
}

func ctxRole(ctx context.Context) string {
	r, _ := ctx.Value(roleKey{}).(string)
	return r
}

// ActAs returns a context of the controller's lifetime in which actor acts with
// role (WithActor, WithRole): for a front door that authenticated them itself (the
// SSH server). actor must be the authenticated identity ("ssh:FINGERPRINT"), never
// a name the client chose: it is the principal that nodes audit and that limits
// count (principalOf).
func (c *Controller) ActAs(actor, role string) context.Context {
	return WithRole(WithActor(c.ctx, actor), role)
}

// Audit records rec in the controller's audit log (a front door's logins and
// verbs).
func (c *Controller) Audit(rec api.AuditRecord) { c.audits.record(rec) }

// principalOf is who acts in ctx (WithActor, WithRole, and the caller the HTTP
// guard or the MCP transport authenticated). A context without an authenticated
// caller is a front door's that names its authenticated identity as the actor
// (SSH: "ssh:FINGERPRINT", never a client's choice): that actor is then the
// principal too.
func principalOf(ctx context.Context) principal {
	return principal{actor: actorOf(ctx), id: cmp.Or(callerOf(ctx).principal, actorOf(ctx)), role: ctxRole(ctx)}
}

// Nodes returns the node table.
func (c *Controller) Nodes(context.Context) (api.NodeList, error) {
	return api.NodeList{Nodes: c.nodes.list()}, nil
}

// Sessions lists sessions fleet-wide or of one node (f.Node), keeping those whose
// labels (over their node's) carry every label of f.Labels.
func (c *Controller) Sessions(ctx context.Context, f api.SessionFilter) (api.SessionList, error) {
	node, labels := f.Node, f.Labels
	names := c.nodes.selectNodes(nil)
	if node != "" {
		if err := api.ValidName(node); err != nil {
			return api.SessionList{}, api.Errorf(api.CodeBadRequest, "node: %v", err)
		}
		names = []string{node}
	}
	out, err := c.sessionsOf(ctx, principalOf(ctx), names, node != "")
	if err != nil || len(labels) == 0 {
		return out, err
	}
	nodeLabels := map[string]map[string]string{}
	for _, n := range c.nodes.list() {
		nodeLabels[n.Name] = n.Labels
	}
	kept := out.Sessions[:0]
	for _, s := range out.Sessions {
		all := map[string]string{}
		for k, v := range nodeLabels[s.Node] {
			all[k] = v
		}
		for k, v := range s.Labels {
			all[k] = v
		}
		if matches(all, labels) {
			kept = append(kept, s)
		}
	}
	out.Sessions = kept
	return out, nil
}

// NewSession creates a session on req.Node, or on the node the table picks.
func (c *Controller) NewSession(ctx context.Context, req api.NewSession) (api.Session, error) {
	return c.create(ctx, principalOf(ctx), req)
}

func (c *Controller) sessionCall(ctx context.Context, node, id, verb string, req, out any, timeout time.Duration) error {
	if err := api.ValidName(node); err != nil {
		return api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	if err := api.ValidName(id); err != nil {
		return api.Errorf(api.CodeBadRequest, "session: %v", err)
	}
	if req == nil {
		req = api.SessionRequest{Session: id}
	}
	if timeout == 0 {
		timeout = c.cfg.RequestTimeout
	}
	return c.call(ctx, principalOf(ctx), node, verb, req, out, timeout)
}

// Session reads one session.
func (c *Controller) Session(ctx context.Context, node, id string) (s api.Session, err error) {
	err = c.sessionCall(ctx, node, id, "get", nil, &s, 0)
	return s, err
}

// UpdateSession retitles, describes or relabels a session.
func (c *Controller) UpdateSession(ctx context.Context, node, id string, p api.SessionPatch) (s api.Session, err error) {
	err = c.sessionCall(ctx, node, id, "update", api.UpdateRequest{Session: id, Title: p.Title, Description: p.Description, Labels: p.Labels}, &s, 0)
	return s, err
}

// CloseSession closes a session and returns its final state.
func (c *Controller) CloseSession(ctx context.Context, node, id string) (s api.Session, err error) {
	err = c.sessionCall(ctx, node, id, "close", nil, &s, 0)
	return s, err
}

// Run runs a command in a session.
func (c *Controller) Run(ctx context.Context, node, id string, b api.RunBody) (br api.BlockResult, err error) {
	err = c.runCall(ctx, node, id, b, &br)
	return br, err
}

// RunRaw is Run with the node's reply as it came (an api.BlockResult, a JSON
// object): the HTTP API passes it on without decoding and encoding the block's
// text again.
func (c *Controller) RunRaw(ctx context.Context, node, id string, b api.RunBody) (json.RawMessage, error) {
	var raw rawJSON
	err := c.runCall(ctx, node, id, b, &raw)
	return raw, err
}

func (c *Controller) runCall(ctx context.Context, node, id string, b api.RunBody, out any) error {
	if err := checkCommand(b.Command); err != nil {
		return err
	}
	return c.sessionCall(ctx, node, id, "run", api.RunRequest{
		Session: id, Command: b.Command, TimeoutMS: b.TimeoutMS, MaxOutputBytes: b.MaxOutputBytes, IdempotencyKey: b.IdempotencyKey,
		TypeAnyway: b.TypeAnyway,
	}, out, c.timeoutFor(b.TimeoutMS))
}

// Input types raw text into a session.
func (c *Controller) Input(ctx context.Context, node, id, data string) error {
	return c.sessionCall(ctx, node, id, "input", api.InputRequest{Session: id, Data: data}, nil, 0)
}

// AttachInput types raw text into a session for a person in an attach: their
// writer lease says so (api.InputRequest.Attach).
func (c *Controller) AttachInput(ctx context.Context, node, id, data string) error {
	return c.sessionCall(ctx, node, id, "input", api.InputRequest{Session: id, Data: data, Attach: true}, nil, 0)
}

// TakeOver gives the session's writer lease to the caller; the writer that held it
// is told (api.EventTakenOver).
func (c *Controller) TakeOver(ctx context.Context, node, id string) (t api.TakeOver, err error) {
	err = c.sessionCall(ctx, node, id, "take_over", api.TakeOverRequest{Session: id}, &t, 0)
	return t, err
}

// WatchEvents calls fn with each event of the session (api.SessionEvent, from
// the node's event subject) from now until stop is called. fn runs on the bus's
// goroutine: it must not block.
func (c *Controller) WatchEvents(node, id string, fn func(api.SessionEvent)) (stop func(), err error) {
	if err := api.ValidName(node); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	if err := api.ValidName(id); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "session id: %v", err)
	}
	unsub, err := c.share.Subscribe(c.subj.Event(node, id), func(_ string, _ map[string]string, data []byte) {
		var ev api.SessionEvent
		if json.Unmarshal(data, &ev) == nil {
			fn(ev)
		}
	})
	if err != nil {
		return nil, api.Errorf(api.CodeUnavailable, "cannot subscribe to the events of %s/%s", node, id)
	}
	return func() { _ = unsub() }, nil
}

// WatchBlocks calls fn with each block event of the session (api.BlockEvent, from
// the node's block subject: a block started or finished) from now until stop is
// called. fn runs on the bus's goroutine: it must not block.
func (c *Controller) WatchBlocks(node, id string, fn func(api.BlockEvent)) (stop func(), err error) {
	if err := api.ValidName(node); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	if err := api.ValidName(id); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "session id: %v", err)
	}
	unsub, err := c.share.Subscribe(c.subj.Block(node, id), func(_ string, _ map[string]string, data []byte) {
		var ev api.BlockEvent
		if json.Unmarshal(data, &ev) == nil && ev.Node == node && ev.Session == id {
			fn(ev)
		}
	})
	if err != nil {
		return nil, api.Errorf(api.CodeUnavailable, "cannot subscribe to the blocks of %s/%s", node, id)
	}
	return func() { _ = unsub() }, nil
}

// Keys sends named keys to a session.
func (c *Controller) Keys(ctx context.Context, node, id string, keys ...string) error {
	return c.sessionCall(ctx, node, id, "keys", api.KeysRequest{Session: id, Keys: keys}, nil, 0)
}

// Resize resizes a session's terminal.
func (c *Controller) Resize(ctx context.Context, node, id string, cols, rows int) (s api.Session, err error) {
	err = c.sessionCall(ctx, node, id, "resize", api.ResizeRequest{Session: id, Cols: cols, Rows: rows}, &s, 0)
	return s, err
}

// Redraw writes to w what an attaching terminal sees first: the session's current
// screen, redrawn (one Write). It returns the output offset live output continues
// from (for Follow).
func (c *Controller) Redraw(ctx context.Context, node, id string, w io.Writer) (int64, error) {
	return c.redraw(ctx, principalOf(ctx), node, id, func(p []byte) error { _, err := w.Write(p); return err })
}

// Follow writes a session's output from offset from to w, gap-free and in order,
// until ctx is done (or the controller shuts down), the session exits (after its
// last byte: exited, with its exit code when the node knows it), the node goes
// down, or w fails (its error is returned as it is). It blocks; the bytes written count in the stream metrics.
func (c *Controller) Follow(ctx context.Context, node, id string, from int64, w io.Writer) (exitCode *int, exited bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)() // the controller's end ends its streams
	end, err := c.follow(ctx, principalOf(ctx), node, id, from, func(_ int64, p []byte) error {
		n, err := w.Write(p)
		c.metrics.streamBytes.Add(float64(n))
		return err
	})
	return end.exitCode, end.exited, err
}

// Output reads a session's raw output from offset from, at most max bytes (0:
// the node's page, api.MaxReadBytes), with where the output stands now.
func (c *Controller) Output(ctx context.Context, node, id string, from int64, max int) (rr api.ReadReply, err error) {
	err = c.sessionCall(ctx, node, id, "read", api.ReadRequest{Session: id, From: from, Max: max}, &rr, 0)
	return rr, err
}

// Screen reads a session's screen.
func (c *Controller) Screen(ctx context.Context, node, id string) (sc api.Screen, err error) {
	err = c.sessionCall(ctx, node, id, "screen", nil, &sc, 0)
	return sc, err
}

// Blocks lists a session's blocks.
func (c *Controller) Blocks(ctx context.Context, node, id string) (bl api.BlockList, err error) {
	err = c.sessionCall(ctx, node, id, "blocks", nil, &bl, 0)
	return bl, err
}

// Block reads block n with its text, as q selects it.
func (c *Controller) Block(ctx context.Context, node, id string, n int, q api.BlockQuery) (br api.BlockResult, err error) {
	req := api.BlockRequest{Session: id, N: n, Offset: q.Offset, Limit: q.Limit, Grep: q.Grep, MaxBytes: q.MaxBytes}
	err = c.sessionCall(ctx, node, id, "block", req, &br, blockTimeout(c.cfg.RequestTimeout))
	return br, err
}

// blockTimeout bounds a block request. Rendering a block is work proportional to its
// size (a grep over a block of many MB takes seconds on a busy host), so it gets more
// than a request that only reads state.
func blockTimeout(request time.Duration) time.Duration { return max(request, 30*time.Second) }

// Wait waits on a session's state (q.Until, for at most q.TimeoutMS) and returns
// it with its last block.
func (c *Controller) Wait(ctx context.Context, node, id string, q api.WaitQuery) (api.WaitResult, error) {
	until, after, timeoutMS := q.Until, q.After, q.TimeoutMS
	if until == "" {
		until = api.UntilIdle
	}
	timeoutMS = min(max(timeoutMS, 0), int(api.MaxWait/time.Millisecond))
	var wr api.WaitReply
	if err := c.sessionCall(ctx, node, id, "wait", api.WaitRequest{Session: id, Until: until, After: after, TimeoutMS: timeoutMS}, &wr, c.timeoutFor(timeoutMS)); err != nil {
		return api.WaitResult{}, err
	}
	out := api.WaitResult{OK: wr.OK, BlockResult: api.BlockResult{Session: wr.Session}}
	if wr.Session.Blocks > 0 {
		br, err := c.Block(ctx, node, id, wr.Session.Blocks, api.BlockQuery{})
		if err != nil {
			return api.WaitResult{}, err
		}
		out.Block, out.Text, out.OmittedBytes, out.LostBytes = br.Block, br.Text, br.OmittedBytes, br.LostBytes
	}
	return out, nil
}

// Health says whether the controller reaches the bus, and how many nodes are
// alive.
func (c *Controller) Health(context.Context) api.Health {
	by, _ := c.nodes.counts()
	h := api.Health{Status: "ok", NATS: c.cfg.Bus.Connected(), Nodes: by[api.NodeAlive]}
	if !h.NATS {
		h.Status = "degraded"
	}
	return h
}

// Fanout runs one command on many targets.
func (c *Controller) Fanout(ctx context.Context, req api.FanoutRequest) (api.Fanout, error) {
	targets, err := c.fanTargets(req)
	if err != nil {
		return api.Fanout{}, err
	}
	return c.runFanout(ctx, principalOf(ctx), req, targets), nil
}
