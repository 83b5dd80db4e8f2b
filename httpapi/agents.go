package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// The agent routes (DESIGN "Agents"): /v1/agents and /v1/agents/{node}/{id}/….

const agentPath = "/v1/agents/{node}/{id}"

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	out, err := s.fleet.Agents(r.Context(), r.URL.Query().Get("node"))
	s.reply(w, r, out, err)
}

func (s *Server) spawnAgent(w http.ResponseWriter, r *http.Request) {
	var body api.SpawnRequest
	if err := decodeBody(w, r, &body); err != nil {
		s.reply(w, r, nil, err)
		return
	}
	a, err := s.fleet.SpawnAgent(r.Context(), body)
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	w.Header().Set("Location", "/v1/agents/"+a.Node+"/"+a.ID)
	writeJSON(w, http.StatusCreated, a)
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request) {
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.Agent(ctx, node, id) })
}

func (s *Server) killAgent(w http.ResponseWriter, r *http.Request) {
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.KillAgent(ctx, node, id) })
}

func (s *Server) sendAgent(w http.ResponseWriter, r *http.Request) {
	withBody(s, w, r, func(ctx context.Context, node, id string, b api.AgentSendBody) (any, error) {
		return s.fleet.SendAgent(ctx, node, id, b.Text)
	})
}

func (s *Server) interruptAgent(w http.ResponseWriter, r *http.Request) {
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) { return s.fleet.InterruptAgent(ctx, node, id) })
}

// waitAgent waits for ?state=ready,done (default: ready or a final state) for at
// most ?timeout_ms=.
func (s *Server) waitAgent(w http.ResponseWriter, r *http.Request) {
	states, err := api.ParseAgentStates(r.URL.Query().Get("state"))
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	ms, err := queryInt(r, "timeout_ms")
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	tms := int(min(ms, int64(api.MaxWait/time.Millisecond)))
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) {
		return s.fleet.WaitAgent(ctx, node, id, states, tms)
	})
}

// agentOutput is the agent's output as text since ?cursor= (at most ?max_bytes=).
func (s *Server) agentOutput(w http.ResponseWriter, r *http.Request) {
	var q [2]int64
	for i, name := range []string{"cursor", "max_bytes"} {
		var err error
		if q[i], err = queryInt(r, name); err != nil {
			s.reply(w, r, nil, err)
			return
		}
	}
	withTarget(s, w, r, func(ctx context.Context, node, id string) (any, error) {
		return s.fleet.AgentOutput(ctx, node, id, q[0], int(min(q[1], 1<<30)))
	})
}
