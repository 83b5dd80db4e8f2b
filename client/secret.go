package client

import (
	"context"
	"net/http"

	"github.com/fleetmux/fleetmux/api"
)

// SetSecret stores a secret on a node (admin), replacing one of the same name; the
// node types it at a password prompt a policy `secrets` entry names. No call
// returns a value back.
func (c *Client) SetSecret(ctx context.Context, node, name, value string) (api.SecretInfo, error) {
	var out api.SecretInfo
	p, err := secretPath(node, name)
	if err != nil {
		return out, err
	}
	err = c.do(ctx, http.MethodPut, p, nil, api.SecretBody{Value: value}, &out)
	return out, err
}

// Secrets lists the names of a node's secrets (admin).
func (c *Client) Secrets(ctx context.Context, node string) (api.SecretList, error) {
	var out api.SecretList
	if err := checkName("node name", node); err != nil {
		return out, err
	}
	err := c.do(ctx, http.MethodGet, "/v1/nodes/"+node+"/secrets", nil, nil, &out)
	return out, err
}

// DeleteSecret removes a secret from a node (admin).
func (c *Client) DeleteSecret(ctx context.Context, node, name string) (api.SecretInfo, error) {
	var out api.SecretInfo
	p, err := secretPath(node, name)
	if err != nil {
		return out, err
	}
	err = c.do(ctx, http.MethodDelete, p, nil, nil, &out)
	return out, err
}

// secretPath is /v1/nodes/{node}/secrets/{name}, with the names checked.
func secretPath(node, name string) (string, error) {
	if err := checkName("node name", node); err != nil {
		return "", err
	}
	if err := checkName("secret name", name); err != nil {
		return "", err
	}
	return "/v1/nodes/" + node + "/secrets/" + name, nil
}
