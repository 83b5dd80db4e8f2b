package controller

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// fanTarget is one target of a fan-out, resolved.
type fanTarget struct {
	node    string
	session string     // "" until resolved (fresh or by title)
	err     *api.Error // set when the target cannot run at all
}

// fanTargets validates a fan-out request and resolves its selector to targets.
func (c *Controller) fanTargets(req api.FanoutRequest) ([]fanTarget, error) {
	if err := checkCommand(req.Command); err != nil {
		return nil, err
	}
	switch {
	case req.TimeoutMS < 0, req.Batch < 0, req.MaxOutputBytes < -1:
		return nil, api.Errorf(api.CodeBadRequest, "timeout_ms, batch and max_output_bytes must not be negative")
	case len(req.IdempotencyKey) > 128:
		return nil, api.Errorf(api.CodeBadRequest, "idempotency_key over 128 bytes")
	case len(req.Session) > 256:
		return nil, api.Errorf(api.CodeBadRequest, "session title over 256 bytes")
	}
	sel := req.Selector
	if err := checkSelectorLabels(sel); err != nil {
		return nil, err
	}
	if len(sel.Sessions) > 0 {
		if sel.All || len(sel.Nodes) > 0 || len(sel.Labels) > 0 {
			return nil, api.Errorf(api.CodeBadRequest, "selector: sessions excludes all, nodes and labels")
		}
		if len(sel.Sessions) > MaxFanoutTargets {
			return nil, api.Errorf(api.CodeTooLarge, "%d sessions (limit %d)", len(sel.Sessions), MaxFanoutTargets)
		}
		seen := map[string]bool{}
		var out []fanTarget
		for _, a := range sel.Sessions {
			node, id, err := api.ParseAddress(a)
			if err != nil {
				return nil, api.Errorf(api.CodeBadRequest, "selector: %v", err)
			}
			if seen[a] {
				return nil, api.Errorf(api.CodeBadRequest, "selector: session %s listed twice", a)
			}
			seen[a] = true
			out = append(out, c.checkTarget(fanTarget{node: node, session: id}))
		}
		return out, nil
	}
	return c.nodeTargets(sel)
}

// nodeTargets resolves a selector without sessions to one target per node
// (all, nodes, labels, or nodes that match the labels too).
func (c *Controller) nodeTargets(sel api.Selector) ([]fanTarget, error) {
	var names []string
	switch {
	case len(sel.Nodes) > 0:
		if len(sel.Nodes) > MaxFanoutTargets {
			return nil, api.Errorf(api.CodeTooLarge, "%d nodes (limit %d)", len(sel.Nodes), MaxFanoutTargets)
		}
		seen := map[string]bool{}
		for _, n := range sel.Nodes {
			if err := api.ValidName(n); err != nil {
				return nil, api.Errorf(api.CodeBadRequest, "selector: node: %v", err)
			}
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
		if len(sel.Labels) > 0 { // both: nodes that match both
			have := map[string]bool{}
			for _, n := range c.nodes.selectNodes(sel.Labels) {
				have[n] = true
			}
			kept := names[:0]
			for _, n := range names {
				if _, _, known := c.nodes.lookup(n); have[n] || !known {
					kept = append(kept, n) // unknown nodes stay: they are reported
				}
			}
			names = kept
		}
	case len(sel.Labels) > 0 || sel.All:
		names = c.nodes.selectNodes(sel.Labels)
	default:
		return nil, api.Errorf(api.CodeBadRequest, "empty selector: set all, nodes, labels or sessions")
	}
	if len(names) == 0 {
		return nil, api.Errorf(api.CodeNotFound, "no usable node matches the selector")
	}
	out := make([]fanTarget, 0, len(names))
	for _, n := range names {
		out = append(out, c.checkTarget(fanTarget{node: n}))
	}
	return out, nil
}

// checkSelectorLabels checks a selector's label keys.
func checkSelectorLabels(sel api.Selector) error {
	for k := range sel.Labels {
		if api.ValidName(k) != nil {
			return api.Errorf(api.CodeBadRequest, "selector label %q: keys are A-Z a-z 0-9 _ -", k)
		}
	}
	return nil
}

// checkTarget marks a target on an unknown or dead node as failed up front.
func (c *Controller) checkTarget(t fanTarget) fanTarget {
	st, _, known := c.nodes.lookup(t.node)
	switch {
	case !known:
		t.err = api.Errorf(api.CodeNotFound, "unknown node %q", t.node)
	case !usable(st):
		t.err = api.Errorf(api.CodeUnavailable, "node %s is %s", t.node, st)
	}
	return t
}

// runFanout runs the targets, at most batch at once, and collects one result each,
// in target order.
func (c *Controller) runFanout(ctx context.Context, who principal, req api.FanoutRequest, targets []fanTarget) api.Fanout {
	batch := req.Batch
	if batch <= 0 || batch > MaxFanoutBatch {
		batch = MaxFanoutBatch
	}
	results := make([]api.FanoutResult, len(targets))
	var stopped atomic.Bool
	sem := make(chan struct{}, batch)
	var wg sync.WaitGroup
	for i, t := range targets {
		if t.err != nil {
			results[i] = api.FanoutResult{Node: t.node, Session: t.session, Error: t.err}
			if req.StopOnFailure {
				stopped.Store(true)
			}
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || stopped.Load() {
			if ctx.Err() == nil {
				// A slot was taken: give it back.
				<-sem
			}
			results[i] = api.FanoutResult{Node: t.node, Session: t.session, Error: api.Errorf(api.CodeSkipped, "not started: an earlier target failed (stop_on_failure)")}
			if ctx.Err() != nil {
				results[i].Error = api.Errorf(api.CodeSkipped, "not started: the request was cancelled")
			}
			continue
		}
		wg.Add(1)
		go func() { // owned by this fan-out: joined below
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = c.runTarget(ctx, who, req, t)
			if results[i].Error != nil && req.StopOnFailure {
				stopped.Store(true)
			}
		}()
	}
	wg.Wait()
	out := api.Fanout{Results: results}
	for _, r := range results {
		switch {
		case r.Error == nil:
			out.OK++
			c.metrics.fanout.WithLabelValues("ok").Inc()
		case r.Error.Code == api.CodeSkipped:
			out.Failed++
			c.metrics.fanout.WithLabelValues("skipped").Inc()
		default:
			out.Failed++
			c.metrics.fanout.WithLabelValues("failed").Inc()
		}
	}
	return out
}

// runTarget runs the command on one target: in its session, in the session titled
// req.Session (created when missing), or in a fresh session that is closed again
// once the command has finished.
func (c *Controller) runTarget(ctx context.Context, who principal, req api.FanoutRequest, t fanTarget) (res api.FanoutResult) {
	start := time.Now()
	res = api.FanoutResult{Node: t.node, Session: t.session}
	defer func() { res.DurationMS = time.Since(start).Milliseconds() }()
	fail := func(err error) api.FanoutResult {
		if ae, ok := err.(*api.Error); ok {
			res.Error = ae
		} else {
			res.Error = api.Errorf(api.CodeUnavailable, "%v", err)
		}
		return res
	}
	fresh := false
	if t.session == "" {
		id, created, err := c.fanSession(ctx, who, t.node, req)
		if err != nil {
			return fail(err)
		}
		t.session, fresh = id, created && req.Session == ""
		res.Session = id
	}
	var br api.BlockResult
	timeoutMS := req.TimeoutMS
	if timeoutMS == 0 {
		timeoutMS = int(DefaultFanoutTimeout / time.Millisecond)
	}
	err := c.call(ctx, who, t.node, "run", api.RunRequest{
		Session: t.session, Command: req.Command, TimeoutMS: timeoutMS,
		MaxOutputBytes: req.MaxOutputBytes, IdempotencyKey: req.IdempotencyKey,
	}, &br, c.timeoutFor(timeoutMS))
	if err != nil {
		return fail(err)
	}
	blk := br.Block
	res.Block, res.ExitCode, res.Text, res.OmittedBytes = &blk, blk.ExitCode, br.Text, br.OmittedBytes
	switch {
	case blk.State != api.BlockDone:
		res.Error = api.Errorf(api.CodeTimeout, "still running after %d ms (session %s/%s kept)", timeoutMS, t.node, t.session)
		return res
	case blk.ExitCode != nil && *blk.ExitCode != 0:
		res.Error = api.Errorf(api.CodeExitStatus, "exit code %d", *blk.ExitCode)
	case blk.ExitCode == nil:
		note := blk.ExitCodeNote
		if note == "" {
			note = "no reason given"
		}
		res.Error = api.Errorf(api.CodeExitUnknown, "finished, exit code unknown: %s", note)
	}
	if fresh {
		// The block and its text are in the result and the recording keeps the
		// output; the session is not needed any more.
		if err := c.call(ctx, who, t.node, "close", api.SessionRequest{Session: t.session}, nil, c.cfg.RequestTimeout); err != nil {
			c.log.Warn("fan-out session not closed", "node", t.node, "session", t.session, "err", err)
		}
	}
	return res
}

// fanSession finds (by title) or creates the session a fan-out target runs in.
func (c *Controller) fanSession(ctx context.Context, who principal, node string, req api.FanoutRequest) (id string, created bool, err error) {
	if req.Session != "" {
		var list api.SessionList
		if err := c.call(ctx, who, node, "list", struct{}{}, &list, c.cfg.RequestTimeout); err != nil {
			return "", false, err
		}
		for _, s := range list.Sessions {
			if s.Title == req.Session && s.State != api.StateExited {
				return s.ID, false, nil
			}
		}
	}
	title := req.Session
	if title == "" {
		title = "fan-out"
	}
	var s api.Session
	if err := c.call(ctx, who, node, "create", api.CreateRequest{Title: title, Shell: req.Shell}, &s, createTimeout); err != nil {
		return "", false, err
	}
	return s.ID, true, nil
}
