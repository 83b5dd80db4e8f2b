package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/session"
)

// handler serves one verb. It returns the reply value or an error; errors that are
// not *api.Error become code "internal" (and are logged: the caller sees a generic
// message, the operator the detail).
type handler func(n *Node, ctx context.Context, req request) (any, error)

// request is one decoded request.
type request struct {
	verb string
	data []byte
	at   time.Time // when it arrived: its audit record's time
	// Who made it, from its verified envelope (authorize): empty until verified.
	// principal is the authenticated identity; actor is only the caller's label.
	actor, principal, role, controller string
	verified                           bool
	// label is the request's bare api.HeaderActor, audited (as a claim) only when
	// the request is refused before it is verified: it is never an identity.
	label string
	// decision is what the guard decided for a mutating request (its audit record
	// names it).
	decision *guard.Decision
	// traceID is the trace the request is part of ("" untraced): its audit
	// record names it.
	traceID string
}

// verbs are the handlers of the node API, one per row of api.NodeVerbs (a test
// checks both ways); api.NodeVerbs says which are mutating (audited), long, and
// which role each needs.
var verbs = map[string]handler{
	api.VerbCreate:       (*Node).create,
	api.VerbList:         (*Node).list,
	api.VerbGet:          (*Node).get,
	api.VerbUpdate:       (*Node).update,
	api.VerbClose:        (*Node).closeSession,
	api.VerbRun:          (*Node).run,
	api.VerbInput:        (*Node).input,
	api.VerbKeys:         (*Node).keys,
	api.VerbResize:       (*Node).resize,
	api.VerbScreen:       (*Node).screen,
	api.VerbBlocks:       (*Node).blocks,
	api.VerbBlock:        (*Node).block,
	api.VerbDigestBlocks: (*Node).digestBlocks,
	api.VerbRead:         (*Node).read,
	api.VerbRecording:    (*Node).recording,
	api.VerbWait:         (*Node).wait,
	api.VerbTakeOver:     (*Node).takeOverVerb,
	api.VerbApprovals:    (*Node).listApprovals,
	api.VerbApproval:     (*Node).getApproval,
	api.VerbDecide:       (*Node).decideApproval,
	api.VerbSecretSet:    (*Node).secretSet,
	api.VerbSecretLs:     (*Node).secretList,
	api.VerbSecretRm:     (*Node).secretRemove,

	api.VerbAgentSpawn:     (*Node).agentSpawn,
	api.VerbAgentList:      (*Node).agentList,
	api.VerbAgentGet:       (*Node).agentGet,
	api.VerbAgentKill:      (*Node).agentKill,
	api.VerbAgentSend:      (*Node).agentSend,
	api.VerbAgentInterrupt: (*Node).agentInterrupt,
	api.VerbAgentWait:      (*Node).agentWait,
	api.VerbAgentOutput:    (*Node).agentOutput,

	api.VerbExec:       (*Node).exec,
	api.VerbExecGet:    (*Node).execGet,
	api.VerbExecWait:   (*Node).execWait,
	api.VerbExecOutput: (*Node).execOutput,
	api.VerbExecKill:   (*Node).execKill,
}

// handle is the bus callback: it runs on its own goroutine per request. The
// request's envelope is verified first (authorize); a refused request is audited,
// whatever its verb. An error goes back as the service error the bus sends in NATS
// micro's error headers, never as a body.
func (n *Node) handle(ctx context.Context, verb, subject string, header map[string]string, data []byte) ([]byte, *api.Error) {
	req := request{verb: verb, data: data, at: time.Now().UTC()}
	ctx, span := n.traceRequest(ctx, verb, header)
	req.traceID = traceID(ctx, header)
	if aerr := n.authorize(subject, header, &req); aerr != nil {
		if !req.verified {
			req.label = header[api.HeaderActor]
		}
		n.audits.Add(func() []byte { return n.auditRecord(req, nil, aerr) })
		endRequest(span, req, aerr)
		return nil, aerr
	}
	h, ok := verbs[verb]
	spec, _ := api.NodeVerb(verb)
	if !ok {
		aerr := api.Errorf(api.CodeBadRequest, "unknown verb %q", verb)
		endRequest(span, req, aerr)
		return nil, aerr
	}
	if spec.Mutating {
		req.decision = &guard.Decision{}
	}
	out, err := h(n, ctx, req)
	var aerr *api.Error
	if err != nil && !errors.As(err, &aerr) {
		n.log.Error("request failed", "verb", verb, "err", err)
		aerr = api.Errorf(api.CodeInternal, "%s failed on node %s (details in its log)", verb, n.cfg.Name)
	}
	if spec.Mutating {
		// Queued before the reply goes out, so records keep the order of the
		// replies; made and published within AuditDelay, off the request path.
		n.audits.Add(func() []byte { return n.auditRecord(req, out, aerr) })
	}
	endRequest(span, req, aerr)
	if aerr != nil {
		return nil, aerr
	}
	b, jerr := json.Marshal(out)
	if jerr != nil {
		n.log.Error("reply not encodable", "verb", verb, "err", jerr)
		return nil, api.Errorf(api.CodeInternal, "reply not encodable")
	}
	return b, nil
}

// decode parses a JSON request body into v (an empty body is an empty object).
func decode(req request, v any) error {
	if len(strings.TrimSpace(string(req.data))) == 0 {
		req.data = []byte("{}")
	}
	if err := json.Unmarshal(req.data, v); err != nil {
		return api.Errorf(api.CodeBadRequest, "malformed JSON for %s: %v", req.verb, err)
	}
	return nil
}

// target decodes a request that names a session into v and finds the session.
func (n *Node) target(req request, v any) (*entry, error) {
	if err := decode(req, v); err != nil {
		return nil, err
	}
	if id, ok := sessionField(v); ok {
		return n.lookup(id)
	}
	var named struct {
		Session string `json:"session"`
	}
	_ = json.Unmarshal(req.data, &named) // decode has already accepted the JSON
	return n.lookup(named.Session)
}

// sessionField reads the Session string field of a decoded request (every request
// type that names a session has one), so the body is not decoded twice.
func sessionField(v any) (string, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return "", false
	}
	f := rv.FieldByName("Session")
	if !f.IsValid() || f.Kind() != reflect.String {
		return "", false
	}
	return f.String(), true
}

// lookup finds a session by id.
func (n *Node) lookup(id string) (*entry, error) {
	if err := api.ValidName(id); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "session id: %v", err)
	}
	n.mu.Lock()
	e := n.sessions[id]
	n.mu.Unlock()
	if e == nil {
		return nil, api.Errorf(api.CodeNotFound, "no session %s/%s", n.cfg.Name, id)
	}
	return e, nil
}

// sessionErr maps session errors to API errors.
func sessionErr(id string, err error) error {
	code := api.CodeInternal
	switch {
	case err == nil:
		return nil
	case errors.Is(err, session.ErrBusy):
		code = api.CodeBusy
	case errors.Is(err, session.ErrExited):
		code = api.CodeExited
	case errors.Is(err, session.ErrClosed), errors.Is(err, session.ErrNoBlock):
		code = api.CodeNotFound
	case errors.Is(err, session.ErrTooLarge):
		code = api.CodeTooLarge
	case errors.Is(err, session.ErrSandbox):
		return api.Errorf(api.CodeSandbox, "%v: nothing was started", err)
	case errors.Is(err, session.ErrBadKey), errors.Is(err, session.ErrBadConfig),
		errors.Is(err, session.ErrBadCwd), errors.Is(err, session.ErrUnknownShell),
		errors.Is(err, session.ErrEmptyCommand), errors.Is(err, session.ErrStart):
		code = api.CodeBadRequest
	case errors.Is(err, session.ErrNotStarted), errors.Is(err, session.ErrInputTimeout),
		errors.Is(err, context.DeadlineExceeded):
		code = api.CodeTimeout
	case errors.Is(err, session.ErrTruncated):
		code = api.CodeGone
	default:
		return fmt.Errorf("session %s: %w", id, err)
	}
	return &api.Error{Code: code, Message: err.Error()}
}

func (n *Node) run(ctx context.Context, req request) (any, error) {
	var r api.RunRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	if r.TimeoutMS < 0 || r.MaxOutputBytes < 0 && r.MaxOutputBytes != -1 {
		return nil, api.Errorf(api.CodeBadRequest, "timeout_ms and max_output_bytes must not be negative (max_output_bytes -1: unlimited)")
	}
	if len(r.IdempotencyKey) > 128 {
		return nil, api.Errorf(api.CodeBadRequest, "idempotency_key over 128 bytes")
	}
	opts := session.RunOptions{Timeout: waitTimeout(r.TimeoutMS), MaxOutputBytes: r.MaxOutputBytes, TypeAnyway: r.TypeAnyway}
	w := writerOf(req)
	ran, err := e.guard.StartRun(w)
	if err != nil {
		return nil, err
	}
	res, err := n.runLeased(ctx, e, req, r, opts)
	ran(res.Block.N, res.Block.State == session.BlockDone)
	n.traceBlock(ctx, e, res.Block)
	if err != nil {
		return nil, err
	}
	return e.result(res), nil
}

// runLeased is run once req's writer holds the session's writer lease: checked,
// then typed (at most once under an idempotency key). Errors are API errors.
func (n *Node) runLeased(ctx context.Context, e *entry, req request, r api.RunRequest, opts session.RunOptions) (session.Result, error) {
	if r.IdempotencyKey != "" {
		return n.runOnce(ctx, e, req, r.Command, opts, e.id+"\x00"+r.IdempotencyKey)
	}
	if err := n.checkRun(ctx, e, req, r.Command); err != nil {
		return session.Result{}, err
	}
	res, err := e.s.Run(ctx, r.Command, opts)
	return res, sessionErr(e.id, err)
}

// idemRun is a run under an idempotency key: its block number once known.
type idemRun struct {
	n    int           // the block; 0 while the first run is in progress or if nothing ran
	done chan struct{} // closed when the first run returned
}

// runOnce runs a command under an idempotency key at most once: the first request
// runs it; a retry (concurrent or later) waits for that run and returns the same
// block (waiting for it to finish, within its own timeout). If the first run
// typed nothing (busy, exited), a retry runs it.
func (n *Node) runOnce(ctx context.Context, e *entry, req request, command string, opts session.RunOptions, key string) (session.Result, error) {
	for {
		n.mu.Lock()
		ir := n.idem[key]
		if ir == nil {
			ir = &idemRun{done: make(chan struct{})}
			n.idem[key] = ir
			n.idemKeys = append(n.idemKeys, key)
			if len(n.idemKeys) > 4096 {
				delete(n.idem, n.idemKeys[0])
				n.idemKeys = n.idemKeys[1:]
			}
			n.mu.Unlock()
			return n.runFirst(ctx, e, req, command, opts, key, ir)
		}
		n.mu.Unlock()
		timer := time.NewTimer(opts.Timeout)
		select {
		case <-ir.done:
			timer.Stop()
		case <-timer.C:
			return session.Result{}, api.Errorf(api.CodeBusy, "a run with this idempotency key is still starting")
		case <-ctx.Done():
			timer.Stop()
			return session.Result{}, sessionErr(e.id, ctx.Err())
		}
		if ir.n == 0 {
			continue // nothing ran: this retry may run it
		}
		res, err := e.s.WaitBlock(ctx, ir.n, opts)
		if err != nil {
			return res, sessionErr(e.id, err)
		}
		return res, nil
	}
}

func (n *Node) runFirst(ctx context.Context, e *entry, req request, command string, opts session.RunOptions, key string, ir *idemRun) (session.Result, error) {
	before := len(e.s.Blocks())
	err := n.checkRun(ctx, e, req, command)
	var res session.Result
	if err == nil {
		res, err = e.s.Run(ctx, command, opts)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	defer close(ir.done)
	if err != nil && res.Block.N == 0 && len(e.s.Blocks()) == before {
		if n.idem[key] == ir {
			delete(n.idem, key) // nothing ran: a retry may run it
		}
		return res, sessionErr(e.id, err)
	}
	ir.n = res.Block.N
	if ir.n == 0 {
		ir.n = len(e.s.Blocks()) // typed, but Run failed before it saw the block
	}
	if err != nil {
		return res, sessionErr(e.id, err)
	}
	return res, nil
}

func (n *Node) input(ctx context.Context, req request) (any, error) {
	var r api.InputRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	if len(r.Data) > api.MaxInputBytes {
		return nil, api.Errorf(api.CodeTooLarge, "input of %d bytes (limit %d)", len(r.Data), api.MaxInputBytes)
	}
	if err := n.typeData(ctx, e, req, []byte(r.Data), r.Attach); err != nil {
		return nil, err
	}
	return api.Empty{}, nil
}

// typeData types data into e for req's writer (attach: a person typing in an
// attach): under the writer lease, decided by the guard. The input verb and an
// agent's prompt (agent_send) both type through it.
func (n *Node) typeData(ctx context.Context, e *entry, req request, data []byte, attach bool) error {
	w := writerOf(req)
	if err := e.guard.Typed(w, attach); err != nil {
		return err
	}
	if err := n.guard.Check(ctx, guard.Request{Verb: guard.VerbInput, Session: e.guard, Writer: w, Data: data,
		AtPrompt: e.atPrompt(), Held: heldOf(guard.VerbInput, w, "", data, nil), Decision: req.decision}); err != nil {
		return err
	}
	// Noted before it is written: the shell may ask about the line it ends at once.
	e.guard.TypedInput(w, data)
	if err := e.s.Input(data); err != nil {
		return sessionErr(e.id, err)
	}
	return nil
}

func (n *Node) keys(ctx context.Context, req request) (any, error) {
	var r api.KeysRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	if len(r.Keys) == 0 || len(r.Keys) > 1024 {
		return nil, api.Errorf(api.CodeBadRequest, "keys: want 1 to 1024 key names, got %d", len(r.Keys))
	}
	if err := n.typeKeys(ctx, e, req, r.Keys); err != nil {
		return nil, err
	}
	return api.Empty{}, nil
}

// typeKeys types the named keys into e for req's writer, as typeData types text
// (the keys verb; an agent's Enter and interrupt).
func (n *Node) typeKeys(ctx context.Context, e *entry, req request, keys []string) error {
	typed := keyBytes(keys)
	w := writerOf(req)
	if err := e.guard.Typed(w, false); err != nil {
		return err
	}
	if err := n.guard.Check(ctx, guard.Request{Verb: guard.VerbKeys, Session: e.guard, Writer: w, Data: typed,
		AtPrompt: e.atPrompt(), Held: heldOf(guard.VerbKeys, w, "", typed, keys), Decision: req.decision}); err != nil {
		return err
	}
	e.guard.TypedInput(w, typed) // before it is written, as input's
	if err := e.s.SendKeys(keys...); err != nil {
		return sessionErr(e.id, err)
	}
	return nil
}

func (n *Node) resize(ctx context.Context, req request) (any, error) {
	var r api.ResizeRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	if err := e.s.Resize(r.Cols, r.Rows); err != nil {
		return nil, sessionErr(e.id, err)
	}
	return e.info(), nil
}

func (n *Node) screen(ctx context.Context, req request) (any, error) {
	var r api.SessionRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	scr, err := e.s.Screen()
	if err != nil {
		return nil, sessionErr(e.id, err)
	}
	return scr, nil
}

func (n *Node) blocks(ctx context.Context, req request) (any, error) {
	var r api.SessionRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	bs := e.s.Blocks()
	out := api.BlockList{Blocks: make([]api.Block, len(bs))}
	for i, b := range bs {
		out.Blocks[i] = toBlock(b)
	}
	return out, nil
}

// digestBlocks gives every session's blocks still running or finished after
// the request's Since (api.VerbDigestBlocks).
func (n *Node) digestBlocks(ctx context.Context, req request) (any, error) {
	var r api.DigestBlocksRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	n.mu.Lock()
	entries := make([]*entry, 0, len(n.sessions))
	for _, e := range n.sessions {
		entries = append(entries, e)
	}
	n.mu.Unlock()
	out := api.DigestBlocks{Sessions: map[string][]api.Block{}}
	for _, e := range entries {
		var kept []api.Block
		for _, b := range e.s.Blocks() {
			if b.State == session.BlockRunning || !b.FinishedAt.IsZero() && b.FinishedAt.After(r.Since) {
				kept = append(kept, toBlock(b))
			}
		}
		if len(kept) > 0 {
			out.Sessions[e.id] = kept
		}
	}
	return out, nil
}

func (n *Node) block(ctx context.Context, req request) (any, error) {
	var r api.BlockRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	res, err := e.s.BlockText(r.N, session.TextOptions{MaxBytes: r.MaxBytes, Offset: r.Offset, Limit: r.Limit, Grep: r.Grep})
	if err != nil {
		return nil, sessionErr(e.id, err)
	}
	return e.result(res), nil
}

func (n *Node) read(ctx context.Context, req request) (any, error) {
	var r api.ReadRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	if r.From < 0 || r.Max < 0 {
		return nil, api.Errorf(api.CodeBadRequest, "from and max must not be negative")
	}
	if r.Max == 0 || r.Max > api.MaxReadBytes {
		r.Max = api.MaxReadBytes
	}
	oldest, end := e.s.Offsets()
	data, err := e.s.Read(r.From, r.Max)
	if errors.Is(err, session.ErrTruncated) {
		// Older than the scrollback: the recording has it.
		data, err = e.readRecorded(r.From, min(oldest, r.From+int64(r.Max)))
		if err != nil {
			return nil, api.Errorf(api.CodeGone, "output at offset %d is no longer in the scrollback (oldest %d) and the recording cannot serve it: %v", r.From, oldest, err)
		}
	} else if err != nil {
		return nil, sessionErr(e.id, err)
	}
	if data == nil {
		data = []byte{}
	}
	if held, ok := e.recorded(); ok {
		oldest = min(oldest, held) // older output was dropped by the recording quota
	}
	return api.ReadReply{Offset: r.From, Data: data, End: end, Oldest: oldest}, nil
}

func (n *Node) wait(ctx context.Context, req request) (any, error) {
	var r api.WaitRequest
	e, err := n.target(req, &r)
	if err != nil {
		return nil, err
	}
	if r.TimeoutMS < 0 {
		return nil, api.Errorf(api.CodeBadRequest, "timeout_ms must not be negative")
	}
	until := session.Until(r.Until)
	switch until {
	case session.UntilIdle, session.UntilWaitingInput, session.UntilExited, session.UntilOutput:
	default:
		return nil, api.Errorf(api.CodeBadRequest, "until %q: want idle, waiting_input, exited or output", r.Until)
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout(r.TimeoutMS))
	defer cancel()
	info, err := e.s.Wait(wctx, until, r.After)
	switch {
	case err == nil:
		return api.WaitReply{Session: e.wire(info), OK: true}, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return api.WaitReply{Session: e.info(), OK: false}, nil
	}
	return nil, sessionErr(e.id, err)
}

// waitTimeout turns a request's timeout_ms into a bounded duration.
func waitTimeout(ms int) time.Duration {
	if ms <= 0 {
		return api.DefaultWait
	}
	return min(time.Duration(ms)*time.Millisecond, api.MaxWait)
}

// checkRun has the guard check a command run is about to type for req's writer
// (on nil the line is expected: the shell's own check lets it pass).
func (n *Node) checkRun(ctx context.Context, e *entry, req request, command string) error {
	w := writerOf(req)
	return n.guard.Check(ctx, guard.Request{Verb: guard.VerbRun, Session: e.guard, Writer: w, Command: command,
		Held: heldOf(guard.VerbRun, w, command, nil, nil), Decision: req.decision})
}
