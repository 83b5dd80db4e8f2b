package controller

import (
	"context"
	"io"
	"slices"

	"github.com/fleetmux/fleetmux/api"
)

// Recording writes a session's whole recording to w as one asciicast file in format
// (api.RecordingV3, or api.RecordingV2): the parts the node keeps when the request
// arrives, read piece by piece with the node's recording verb (api.RecordingRequest),
// one piece in memory at a time. An error before the first write leaves w untouched
// (the caller can still answer it); later ones cut the file short. The bytes count in
// the stream metrics.
func (c *Controller) Recording(ctx context.Context, node, id string, format int, w io.Writer) error {
	req := api.RecordingRequest{Session: id, Format: format, Part: -1, Header: true}
	var parts []int64
	for {
		var rr api.RecordingReply
		if err := c.sessionCall(ctx, node, id, api.VerbRecording, req, &rr, 0); err != nil {
			return err
		}
		if parts == nil {
			parts = rr.Parts
		}
		if len(rr.Data) > 0 {
			n, err := w.Write(rr.Data)
			c.metrics.streamBytes.Add(float64(n))
			if err != nil {
				return err
			}
		}
		if rr.Next < rr.End {
			if req.From != 0 && rr.Part == req.Part && rr.Next <= req.From {
				return api.Errorf(api.CodeInternal, "recording of %s/%s: no progress at %d of part %d", node, id, rr.Next, rr.Part)
			}
			req.Header, req.TUS = false, rr.TUS
			req.Part, req.From, req.End = rr.Part, rr.Next, rr.End
			continue
		}
		req.Header, req.TUS = false, rr.TUS
		i := slices.Index(parts, rr.Part)
		if i < 0 || i == len(parts)-1 {
			return nil // the last part as it was when the request arrived
		}
		req.Part, req.From, req.End = parts[i+1], 0, 0
	}
}
