package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	out, err := s.fleet.Nodes(r.Context())
	s.reply(w, r, out, err)
}

// listSessions lists sessions fleet-wide (or of ?node=), filtered by ?label=k=v
// (repeatable; matched against the session's labels over its node's labels).
// Nodes that do not answer in time are listed in "unavailable".
func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	labels, err := api.ParseLabels(q["label"])
	if err != nil {
		s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	out, err := s.fleet.Sessions(r.Context(), api.SessionFilter{Node: q.Get("node"), Labels: labels})
	s.reply(w, r, out, err)
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var body api.NewSession
	if err := decodeBody(w, r, &body); err != nil {
		s.reply(w, r, nil, err)
		return
	}
	ses, err := s.fleet.NewSession(r.Context(), body)
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+ses.Node+"/"+ses.ID)
	writeJSON(w, http.StatusCreated, ses)
}

// withBody decodes the body into b, then calls fn with the session and a context.
func withBody[B any](s *Server, w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, node, id string, b B) (any, error)) {
	var b B
	if err := decodeBody(w, r, &b); err != nil {
		s.reply(w, r, nil, err)
		return
	}
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return fn(ctx, node, id, b) })
}

// withTarget validates {node}/{id} and replies with what fn returns.
func withTarget(s *Server, w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, node, id string) (any, error)) {
	node, id, err := target(r)
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	out, err := fn(r.Context(), node, id)
	s.reply(w, r, out, err)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.Session(ctx, node, id) })
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.CloseSession(ctx, node, id) })
}

func (s *Server) patchSession(w http.ResponseWriter, r *http.Request) {
	withBody(s, w, r, func(ctx context.Context, node, id string, p api.SessionPatch) (any, error) {
		return s.fleet.UpdateSession(ctx, node, id, p)
	})
}

func (s *Server) input(w http.ResponseWriter, r *http.Request) {
	withBody(s, w, r, func(ctx context.Context, node, id string, b api.InputBody) (any, error) {
		return api.Empty{}, s.fleet.Input(ctx, node, id, b.Data)
	})
}

func (s *Server) keys(w http.ResponseWriter, r *http.Request) {
	withBody(s, w, r, func(ctx context.Context, node, id string, b api.KeysBody) (any, error) {
		return api.Empty{}, s.fleet.Keys(ctx, node, id, b.Keys...)
	})
}

func (s *Server) takeOver(w http.ResponseWriter, r *http.Request) {
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.TakeOver(ctx, node, id) })
}

func (s *Server) resize(w http.ResponseWriter, r *http.Request) {
	withBody(s, w, r, func(ctx context.Context, node, id string, b api.ResizeBody) (any, error) {
		return s.fleet.Resize(ctx, node, id, b.Cols, b.Rows)
	})
}

func (s *Server) runCommand(w http.ResponseWriter, r *http.Request) {
	withBody(s, w, r, func(ctx context.Context, node, id string, b api.RunBody) (any, error) {
		return s.fleet.RunRaw(ctx, node, id, b)
	})
}

func (s *Server) screen(w http.ResponseWriter, r *http.Request) {
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.Screen(ctx, node, id) })
}

func (s *Server) blocks(w http.ResponseWriter, r *http.Request) {
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.Blocks(ctx, node, id) })
}

func (s *Server) block(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "block number %q: want 1, 2, …", r.PathValue("n")))
		return
	}
	var q [3]int64
	for i, name := range []string{"offset", "limit", "max_bytes"} {
		if name == "max_bytes" && r.URL.Query().Get(name) == "-1" {
			q[i] = -1 // unlimited, as in run's max_output_bytes
			continue
		}
		if q[i], err = queryInt(r, name); err != nil {
			s.reply(w, r, nil, err)
			return
		}
	}
	bq := api.BlockQuery{Offset: int(q[0]), Limit: int(q[1]), MaxBytes: int(q[2]), Grep: r.URL.Query().Get("grep")}
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.Block(ctx, node, id, n, bq) })
}

// wait waits on the node for ?until= and replies with the session and its last
// block (with its text).
func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	var q [2]int64
	for i, name := range []string{"timeout_ms", "after"} {
		var err error
		if q[i], err = queryInt(r, name); err != nil {
			s.reply(w, r, nil, err)
			return
		}
	}
	tms := int(min(q[0], int64(api.MaxWait/time.Millisecond)))
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) {
		return s.fleet.Wait(ctx, node, id, api.WaitQuery{Until: r.URL.Query().Get("until"), After: q[1], TimeoutMS: tms})
	})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	h := s.fleet.Health(r.Context())
	code := http.StatusOK
	if !h.NATS {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}
