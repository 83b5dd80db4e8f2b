package client

import (
	"context"

	"github.com/fleetmux/fleetmux/api"
)

// rawBody is a request body sent as is, with its content type (do).
type rawBody struct {
	data        []byte
	contentType string
}

// Policy returns the guardrail policy in force and its version (operator);
// Version 0 means none is set.
func (c *Client) Policy(ctx context.Context) (api.PolicyInfo, error) {
	var out api.PolicyInfo
	err := c.do(ctx, "GET", "/v1/policy", nil, nil, &out)
	return out, err
}

// SetPolicy stores doc, a YAML (or JSON) policy document, as the policy in force
// (admin); every node applies it within a second. A document that does not parse
// is refused (bad_request, naming its line and field).
func (c *Client) SetPolicy(ctx context.Context, doc []byte) (api.PolicyInfo, error) {
	var out api.PolicyInfo
	err := c.do(ctx, "PUT", "/v1/policy", nil, rawBody{data: doc, contentType: "application/yaml"}, &out)
	return out, err
}

// DeletePolicy removes the policy (admin): every node then allows every command.
// It returns the policy that was in force.
func (c *Client) DeletePolicy(ctx context.Context) (api.PolicyInfo, error) {
	var out api.PolicyInfo
	err := c.do(ctx, "DELETE", "/v1/policy", nil, nil, &out)
	return out, err
}
