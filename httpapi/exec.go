package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// The exec routes (DESIGN "Exec"): POST /v1/exec and /v1/exec/{node}/{id}/….

const execPath = "/v1/exec/{node}/{id}"

// execRun runs an exec on one node (node: an api.ExecResult) or on the nodes a
// selector names (selector: an api.ExecFanout, one result per node).
func (s *Server) execRun(w http.ResponseWriter, r *http.Request) {
	var body api.ExecRequest
	if err := decodeBody(w, r, &body); err != nil {
		s.reply(w, r, nil, err)
		return
	}
	if body.Selector != nil {
		out, err := s.fleet.ExecFanout(r.Context(), body)
		s.reply(w, r, out, err)
		return
	}
	out, err := s.fleet.Exec(r.Context(), body)
	s.reply(w, r, out, err)
}

// queryInts reads the named non-negative integer query parameters.
func queryInts(r *http.Request, names ...string) ([]int64, error) {
	out := make([]int64, len(names))
	for i, name := range names {
		var err error
		if out[i], err = queryInt(r, name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Server) getExec(w http.ResponseWriter, r *http.Request) {
	q, err := queryInts(r, "max_output_bytes")
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) {
		return s.fleet.ExecGet(ctx, node, id, int(min(q[0], api.MaxExecOutputBytes)))
	})
}

func (s *Server) killExec(w http.ResponseWriter, r *http.Request) {
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.ExecKill(ctx, node, id) })
}

// waitExec waits at most ?timeout_ms= for the exec to end.
func (s *Server) waitExec(w http.ResponseWriter, r *http.Request) {
	q, err := queryInts(r, "timeout_ms", "max_output_bytes")
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) {
		return s.fleet.ExecWait(ctx, node, id, int(min(q[0], int64(api.MaxWait/time.Millisecond))), int(min(q[1], api.MaxExecOutputBytes)))
	})
}

// execOutput reads ?stream=stdout|stderr from ?from= (at most ?max=).
func (s *Server) execOutput(w http.ResponseWriter, r *http.Request) {
	q, err := queryInts(r, "from", "max")
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	stream := r.URL.Query().Get("stream")
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) {
		return s.fleet.ExecOutput(ctx, node, id, stream, q[0], int(min(q[1], api.MaxExecOutputBytes)))
	})
}
