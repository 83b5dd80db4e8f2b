package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/fleetmux/fleetmux/api"
)

// Exec runs a one-shot process on req.Node (POST /v1/exec), stdout and stderr
// apart.
func (c *Client) Exec(ctx context.Context, req api.ExecRequest) (api.ExecResult, error) {
	var out api.ExecResult
	if err := checkName("node name", req.Node); err != nil {
		return out, err
	}
	err := c.do(ctx, http.MethodPost, "/v1/exec", nil, req, &out)
	return out, err
}

// ExecFanout runs a one-shot process on the nodes req.Selector names: one
// result per node.
func (c *Client) ExecFanout(ctx context.Context, req api.ExecRequest) (api.ExecFanout, error) {
	var out api.ExecFanout
	err := c.do(ctx, http.MethodPost, "/v1/exec", nil, req, &out)
	return out, err
}

// execCall calls a route under /v1/exec/{node}/{id}.
func (c *Client) execCall(ctx context.Context, method, node, id, suffix string, q url.Values, out any) error {
	if err := checkName("node name", node); err != nil {
		return err
	}
	if err := checkName("exec id", id); err != nil {
		return err
	}
	return c.do(ctx, method, "/v1/exec/"+node+"/"+id+suffix, q, nil, out)
}

// ExecGet reads one exec (each stream cut to maxBytes; 0: the server's default).
func (c *Client) ExecGet(ctx context.Context, node, id string, maxBytes int) (api.ExecResult, error) {
	var out api.ExecResult
	q := url.Values{}
	setInt(q, "max_output_bytes", int64(maxBytes))
	err := c.execCall(ctx, http.MethodGet, node, id, "", q, &out)
	return out, err
}

// ExecWait waits up to timeoutMS for an exec to end.
func (c *Client) ExecWait(ctx context.Context, node, id string, timeoutMS, maxBytes int) (api.ExecResult, error) {
	var out api.ExecResult
	q := url.Values{}
	setInt(q, "timeout_ms", int64(timeoutMS))
	setInt(q, "max_output_bytes", int64(maxBytes))
	err := c.execCall(ctx, http.MethodGet, node, id, "/wait", q, &out)
	return out, err
}

// ExecOutput reads one stream of an exec from offset from.
func (c *Client) ExecOutput(ctx context.Context, node, id, stream string, from int64, max int) (api.ExecOutput, error) {
	var out api.ExecOutput
	q := url.Values{}
	if stream != "" {
		q.Set("stream", stream)
	}
	setInt(q, "from", from)
	setInt(q, "max", int64(max))
	err := c.execCall(ctx, http.MethodGet, node, id, "/output", q, &out)
	return out, err
}

// ExecKill ends a running exec.
func (c *Client) ExecKill(ctx context.Context, node, id string) (api.ExecResult, error) {
	var out api.ExecResult
	err := c.execCall(ctx, http.MethodDelete, node, id, "", nil, &out)
	return out, err
}

// Digest reads what happened since q.Since (GET /v1/digest).
func (c *Client) Digest(ctx context.Context, q api.DigestQuery) (api.Digest, error) {
	var out api.Digest
	v := url.Values{}
	for k, s := range map[string]string{"since": q.Since, "scope": q.Scope, "node": q.Node, "session": q.Session} {
		if s != "" {
			v.Set(k, s)
		}
	}
	setInt(v, "budget_tokens", int64(q.BudgetTokens))
	err := c.do(ctx, http.MethodGet, "/v1/digest", v, nil, &out)
	return out, err
}
