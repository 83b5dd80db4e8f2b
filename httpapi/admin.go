package httpapi

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// The fleet-wide routes: fan-out, approvals, tokens, the policy and node secrets.

// fanout runs one command on many targets (POST /v1/run).
func (s *Server) fanout(w http.ResponseWriter, r *http.Request) {
	var req api.FanoutRequest
	if err := decodeBody(w, r, &req); err != nil {
		s.reply(w, r, nil, err)
		return
	}
	out, err := s.fleet.Fanout(r.Context(), req)
	if r.Context().Err() != nil {
		return // the client is gone
	}
	s.reply(w, r, out, err)
}

// listApprovals serves GET /v1/approvals: ?state= (pending by default; "all" for
// every state), ?node=.
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	switch state {
	case "":
		state = api.ApprovalPending
	case "all":
		state = ""
	}
	out, err := s.fleet.Approvals(r.Context(), q.Get("node"), state)
	s.reply(w, r, out, err)
}

// getApproval serves GET /v1/approvals/{node}/{id} (?wait_ms= waits until done).
func (s *Server) getApproval(w http.ResponseWriter, r *http.Request) {
	ms, err := queryInt(r, "wait_ms")
	if err != nil {
		s.reply(w, r, nil, err)
		return
	}
	a, err := s.fleet.Approval(r.Context(), r.PathValue("node"), r.PathValue("id"), int(min(ms, int64(api.MaxWait/time.Millisecond))))
	s.reply(w, r, a, err)
}

// decideApproval serves POST /v1/approvals/{node}/{id}.
func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request) {
	var b api.DecideBody
	if err := decodeBody(w, r, &b); err != nil {
		s.reply(w, r, nil, err)
		return
	}
	a, err := s.fleet.Decide(r.Context(), r.PathValue("node"), r.PathValue("id"), b)
	s.reply(w, r, a, err)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	out, err := s.fleet.Tokens(r.Context())
	s.reply(w, r, out, err)
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	var body api.TokenRequest
	if err := decodeBody(w, r, &body); err != nil {
		s.reply(w, r, nil, err)
		return
	}
	out, err := s.fleet.CreateToken(r.Context(), body)
	s.reply(w, r, out, err)
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	out, err := s.fleet.RevokeToken(r.Context(), r.PathValue("name"))
	s.reply(w, r, out, err)
}

// policyTypes are the content types PUT /v1/policy accepts (YAML, or JSON, which
// YAML accepts).
var policyTypes = map[string]bool{
	"application/yaml": true, "application/x-yaml": true, "text/yaml": true, "text/x-yaml": true,
	"application/json": true, "text/plain": true,
}

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	out, err := s.fleet.Policy(r.Context())
	s.reply(w, r, out, err)
}

func (s *Server) putPolicy(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || !policyTypes[mt] {
			s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "content type %q: send the policy as application/yaml (or application/json)", ct))
			return
		}
	}
	doc, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxPolicyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.reply(w, r, nil, api.Errorf(api.CodeTooLarge, "policy over %d bytes", api.MaxPolicyBytes))
			return
		}
		s.reply(w, r, nil, api.Errorf(api.CodeBadRequest, "reading the policy: %v", err))
		return
	}
	out, err := s.fleet.SetPolicy(r.Context(), doc)
	if err == nil {
		noteAudit(w, func(rec *api.AuditRecord) { rec.PolicyVersion = out.Version })
	}
	s.reply(w, r, out, err)
}

func (s *Server) deletePolicy(w http.ResponseWriter, r *http.Request) {
	out, err := s.fleet.DeletePolicy(r.Context())
	if err == nil {
		noteAudit(w, func(rec *api.AuditRecord) { rec.PolicyVersion = out.Version }) // the version removed
	}
	s.reply(w, r, out, err)
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	var b api.SecretBody
	if err := decodeBody(w, r, &b); err != nil {
		s.reply(w, r, nil, err)
		return
	}
	out, err := s.fleet.SetSecret(r.Context(), r.PathValue("node"), r.PathValue("name"), b.Value)
	s.reply(w, r, out, err)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	out, err := s.fleet.Secrets(r.Context(), r.PathValue("node"))
	s.reply(w, r, out, err)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	out, err := s.fleet.DeleteSecret(r.Context(), r.PathValue("node"), r.PathValue("name"))
	s.reply(w, r, out, err)
}
