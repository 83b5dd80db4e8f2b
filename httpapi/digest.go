package httpapi

import (
	"net/http"

	"github.com/fleetmux/fleetmux/api"
)

// digest serves GET /v1/digest?since=&scope=fleet|node|session&node=&session=&budget_tokens=
// (DESIGN "Digest").
func (s *Server) digest(w http.ResponseWriter, r *http.Request) {
	budget, err := queryInt(r, "budget_tokens")
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	q := r.URL.Query()
	out, err := s.fleet.Digest(r.Context(), api.DigestQuery{Since: q.Get("since"), Scope: q.Get("scope"), Node: q.Get("node"),
		Session: q.Get("session"), BudgetTokens: int(min(budget, api.MaxDigestTokens))})
	s.reply(w, r, out, err)
}
