package client

import (
	"context"

	"github.com/fleetmux/fleetmux/api"
)

// ConsoleLink makes a one-time sign-in link to the controller's web console
// (POST /ui/links): it signs a browser in as this client's token, once, within
// api.ConsoleLink's ExpiresAt. The link's URL is Addr() + its Path.
func (c *Client) ConsoleLink(ctx context.Context) (api.ConsoleLink, error) {
	var out api.ConsoleLink
	err := c.do(ctx, "POST", "/ui/links", nil, nil, &out)
	return out, err
}
