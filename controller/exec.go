package controller

import (
	"context"
	"sync"

	"github.com/fleetmux/fleetmux/api"
)

// Exec (DESIGN "Exec"): one-shot processes without a PTY. The node decides,
// runs, redacts and audits them; the controller routes the request to one node
// or fans it out to the nodes a selector names, one result per node.

// Exec runs req on req.Node and returns its result: ended, or (its timeout
// passed) killed with timed_out, or still running when req.Background.
func (c *Controller) Exec(ctx context.Context, req api.ExecRequest) (api.ExecResult, error) {
	if err := checkExec(req); err != nil {
		return api.ExecResult{}, err
	}
	if req.Node == "" || req.Selector != nil {
		return api.ExecResult{}, api.Errorf(api.CodeBadRequest, "exec: give node (ExecFanout takes a selector)")
	}
	return c.execOn(ctx, principalOf(ctx), req.Node, req)
}

func (c *Controller) execOn(ctx context.Context, who principal, node string, req api.ExecRequest) (api.ExecResult, error) {
	var res api.ExecResult
	req.Node, req.Selector = "", nil
	timeout := c.waitBudget(req.TimeoutMS, api.DefaultExecTimeout)
	err := c.call(ctx, who, node, api.VerbExec, req, &res, timeout)
	return res, err
}

// checkExec checks what the controller can of an exec request (the node checks
// the rest).
func checkExec(req api.ExecRequest) error {
	switch {
	case len(req.Argv) == 0 && req.Command == "":
		return api.Errorf(api.CodeBadRequest, "exec: give argv or command")
	case len(req.Argv) > 0 && req.Command != "":
		return api.Errorf(api.CodeBadRequest, "exec: give argv or command, not both")
	case req.TimeoutMS < 0 || req.MaxOutputBytes < 0:
		return api.Errorf(api.CodeBadRequest, "timeout_ms and max_output_bytes must not be negative")
	case req.Command != "":
		return checkCommand(req.Command)
	}
	return nil
}

// ExecFanout runs req on every node req.Selector names (all, nodes, labels; not
// sessions), at most MaxFanoutBatch at once, and returns one result per node in
// the selector's order; a node where it did not run has the result's error.
func (c *Controller) ExecFanout(ctx context.Context, req api.ExecRequest) (api.ExecFanout, error) {
	if err := checkExec(req); err != nil {
		return api.ExecFanout{}, err
	}
	if req.Selector == nil || req.Node != "" {
		return api.ExecFanout{}, api.Errorf(api.CodeBadRequest, "exec: give node or selector, not both")
	}
	sel := *req.Selector
	if len(sel.Sessions) > 0 {
		return api.ExecFanout{}, api.Errorf(api.CodeBadRequest, "exec: a selector names nodes (all, nodes, labels), not sessions")
	}
	if err := checkSelectorLabels(sel); err != nil {
		return api.ExecFanout{}, err
	}
	if len(sel.Nodes) > MaxFanoutTargets {
		return api.ExecFanout{}, api.Errorf(api.CodeTooLarge, "%d nodes (limit %d)", len(sel.Nodes), MaxFanoutTargets)
	}
	targets, err := c.nodeTargets(sel)
	if err != nil {
		return api.ExecFanout{}, err
	}
	who := principalOf(ctx)
	results := make([]api.ExecResult, len(targets))
	sem := make(chan struct{}, MaxFanoutBatch)
	var wg sync.WaitGroup
	for i, t := range targets {
		if t.err != nil {
			results[i] = api.ExecResult{Node: t.node, Error: t.err}
			continue
		}
		wg.Add(1)
		go func() { // owned by this fan-out: joined below
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = api.ExecResult{Node: t.node, Error: api.Errorf(api.CodeSkipped, "not started: the request was cancelled")}
				return
			}
			defer func() { <-sem }()
			res, err := c.execOn(ctx, who, t.node, req)
			if err != nil {
				ae, ok := err.(*api.Error)
				if !ok {
					ae = api.Errorf(api.CodeUnavailable, "%v", err)
				}
				res = api.ExecResult{Error: ae}
			}
			res.Node = t.node
			results[i] = res
		}()
	}
	wg.Wait()
	out := api.ExecFanout{Results: results}
	for _, r := range results {
		if r.Error == nil && r.ExitCode != nil && *r.ExitCode == 0 {
			out.OK++
		} else {
			out.Failed++
		}
	}
	return out, nil
}

func (c *Controller) execCall(ctx context.Context, node, id, verb string, req, out any, timeoutMS int) error {
	if err := api.ValidName(node); err != nil {
		return api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	if err := api.ValidName(id); err != nil {
		return api.Errorf(api.CodeBadRequest, "exec id: %v", err)
	}
	timeout := c.cfg.RequestTimeout
	if timeoutMS >= 0 {
		timeout = c.timeoutFor(timeoutMS)
	}
	return c.call(ctx, principalOf(ctx), node, verb, req, out, timeout)
}

// ExecGet reads one exec: its state and its output so far (each stream cut to
// maxBytes; 0: the default).
func (c *Controller) ExecGet(ctx context.Context, node, id string, maxBytes int) (res api.ExecResult, err error) {
	err = c.execCall(ctx, node, id, api.VerbExecGet, api.ExecTarget{ExecID: id, MaxOutputBytes: maxBytes}, &res, -1)
	return res, err
}

// ExecWait waits up to timeoutMS for an exec to end and returns it as it is then.
func (c *Controller) ExecWait(ctx context.Context, node, id string, timeoutMS, maxBytes int) (res api.ExecResult, err error) {
	err = c.execCall(ctx, node, id, api.VerbExecWait, api.ExecTarget{ExecID: id, TimeoutMS: timeoutMS, MaxOutputBytes: maxBytes}, &res, timeoutMS)
	return res, err
}

// ExecOutput reads one stream of an exec from offset from (at most max bytes).
func (c *Controller) ExecOutput(ctx context.Context, node, id, stream string, from int64, max int) (out api.ExecOutput, err error) {
	err = c.execCall(ctx, node, id, api.VerbExecOutput, api.ExecOutputRequest{ExecID: id, Stream: stream, From: from, Max: max}, &out, -1)
	return out, err
}

// ExecKill ends a running exec (its process group) and returns it.
func (c *Controller) ExecKill(ctx context.Context, node, id string) (res api.ExecResult, err error) {
	err = c.execCall(ctx, node, id, api.VerbExecKill, api.ExecTarget{ExecID: id}, &res, -1)
	return res, err
}
