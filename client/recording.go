package client

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/fleetmux/fleetmux/api"
)

// Recording writes a session's whole recording to w as one asciicast file: v3
// (api.RecordingV3, or 0) or v2 (api.RecordingV2). A recording the controller cut
// short (its node went down mid-way) is an error, after w got what arrived.
func (c *Client) Recording(ctx context.Context, node, id string, format int, w io.Writer) error {
	q := url.Values{}
	switch format {
	case 0, api.RecordingV3:
	case api.RecordingV2:
		q.Set("format", "v2")
	default:
		return fmt.Errorf("client: recording format %d: want 3 or 2", format)
	}
	resp, err := c.open(ctx, "GET", node, id, "/recording", q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("client: recording of %s/%s cut short: %w", node, id, err)
	}
	return nil
}
