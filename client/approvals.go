package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/fleetmux/fleetmux/api"
)

// Approvals lists approvals fleet-wide (node "" for all nodes) in state: one of
// the api.Approval* states, "all" for every state, "" for pending.
func (c *Client) Approvals(ctx context.Context, node, state string) (api.ApprovalList, error) {
	q := url.Values{}
	if node != "" {
		q.Set("node", node)
	}
	if state != "" {
		q.Set("state", state)
	}
	var out api.ApprovalList
	err := c.do(ctx, "GET", "/v1/approvals", q, nil, &out)
	return out, err
}

// Approval reads one approval; with waitMS > 0 the controller waits (up to it, at
// most 10 min) until it is done: decided, and when approved and run by the node,
// until its block finished.
func (c *Client) Approval(ctx context.Context, node, id string, waitMS int) (api.Approval, error) {
	p, err := approvalPath(node, id)
	if err != nil {
		return api.Approval{}, err
	}
	q := url.Values{}
	if waitMS > 0 {
		q.Set("wait_ms", strconv.Itoa(waitMS))
	}
	var out api.Approval
	err = c.do(ctx, "GET", p, q, nil, &out)
	return out, err
}

// Decide approves or denies a pending approval (admin, or a role its rule names).
func (c *Client) Decide(ctx context.Context, node, id string, b api.DecideBody) (api.Approval, error) {
	p, err := approvalPath(node, id)
	if err != nil {
		return api.Approval{}, err
	}
	var out api.Approval
	err = c.do(ctx, "POST", p, nil, b, &out)
	return out, err
}

func approvalPath(node, id string) (string, error) {
	if err := checkName("node", node); err != nil {
		return "", err
	}
	if err := api.ValidApprovalID(id); err != nil {
		return "", &Error{Code: api.CodeBadRequest, Message: err.Error()}
	}
	return "/v1/approvals/" + node + "/" + id, nil
}
