package client

import (
	"context"
	"net/url"

	"github.com/fleetmux/fleetmux/api"
)

// Tokens lists the controller's API tokens (admin): names, roles, expiry, never
// their secrets.
func (c *Client) Tokens(ctx context.Context) (api.TokenList, error) {
	var out api.TokenList
	err := c.do(ctx, "GET", "/v1/tokens", nil, nil, &out)
	return out, err
}

// CreateToken creates an API token (admin). The reply's Secret is the token: it
// is shown this once.
func (c *Client) CreateToken(ctx context.Context, req api.TokenRequest) (api.NewToken, error) {
	var out api.NewToken
	err := c.do(ctx, "POST", "/v1/tokens", nil, req, &out)
	return out, err
}

// RevokeToken deletes an API token (admin): every controller refuses it from now.
func (c *Client) RevokeToken(ctx context.Context, name string) (api.Token, error) {
	if err := checkName("token", name); err != nil {
		return api.Token{}, err
	}
	var out api.Token
	err := c.do(ctx, "DELETE", "/v1/tokens/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}
