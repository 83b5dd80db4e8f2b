package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes builds the HTTP API. Every reply is JSON (but output, metrics and the
// OpenAPI document); errors are api.ErrorReply. api/openapi.yaml documents every
// route (a test checks it).
func (c *Controller) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h http.Handler) {
		mux.Handle(pattern, h)
		c.patterns = append(c.patterns, pattern)
	}
	s := "/v1/sessions/{node}/{id}"
	for _, r := range []struct {
		pattern string
		h       http.HandlerFunc
	}{
		{"GET /v1/nodes", c.listNodes},
		{"GET /v1/sessions", c.listSessions},
		{"POST /v1/sessions", c.createSession},
		{"GET " + s, c.getSession},
		{"PATCH " + s, c.patchSession},
		{"DELETE " + s, c.deleteSession},
		{"POST " + s + "/run", c.runCommand},
		{"POST " + s + "/input", c.input},
		{"POST " + s + "/keys", c.keys},
		{"POST " + s + "/resize", c.resize},
		{"POST " + s + "/take_over", c.takeOver},
		{"GET " + s + "/screen", c.screen},
		{"GET " + s + "/blocks", c.blocks},
		{"GET " + s + "/blocks/{n}", c.block},
		{"GET " + s + "/output", c.output},
		{"GET " + s + "/wait", c.wait},
		{"GET " + s + "/attach", c.attach},
		{"POST /v1/run", c.fanout},
		{"GET /v1/approvals", c.listApprovals},
		{"GET /v1/approvals/{node}/{id}", c.getApproval},
		{"POST /v1/approvals/{node}/{id}", c.decideApproval},
		{"GET /v1/tokens", c.listTokens},
		{"POST /v1/tokens", c.createToken},
		{"DELETE /v1/tokens/{name}", c.revokeToken},
		{"GET /v1/policy", c.getPolicy},
		{"PUT /v1/policy", c.putPolicy},
		{"DELETE /v1/policy", c.deletePolicy},
		{"GET /v1/nodes/{node}/secrets", c.listSecrets},
		{"PUT /v1/nodes/{node}/secrets/{name}", c.putSecret},
		{"DELETE /v1/nodes/{node}/secrets/{name}", c.deleteSecret},
		{"GET /v1/openapi.yaml", openAPI},
		{"GET /healthz", c.health},
	} {
		handle(r.pattern, r.h)
	}
	handle("GET /metrics", promhttp.HandlerFor(c.cfg.Registry, promhttp.HandlerOpts{ErrorLog: slogPrinter{c.log}}))
	handle("/mcp", c.mcpHandler()) // MCP over streamable HTTP, all methods (mcp.go)
	// Every routed request is timed (metrics, innermost: the audit's record is not
	// the request's time) and, when its route mutates, audited (middleware.go).
	return c.guard(mux, c.audits.middleware(c.metrics.middleware(mux)))
}

// guard checks what every request must pass before routing: a known route (JSON
// 404/405 otherwise), an API token whose role reaches the route's (api.Routes;
// a route missing there is refused to all), and the browser defences (a request
// from a web page must not reach a loopback API: cross-site requests). Requests
// that pass go to next (the mux behind its middlewares), with their caller in
// their context.
func (c *Controller) guard(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := mux.Handler(r)
		if pattern == "" {
			c.noRoute(w, r, mux)
			return
		}
		need, listed := api.Routes[pattern]
		if !listed {
			c.log.Error("route missing from api.Routes: refused", "route", pattern)
			writeError(w, api.Errorf(api.CodeForbidden, "route %s has no role in the access table", pattern))
			return
		}
		if need == api.RoleNone {
			next.ServeHTTP(w, r)
			return
		}
		who, aerr := c.authenticate(r)
		if aerr != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fleetmux"`)
			writeError(w, aerr)
			return
		}
		if !api.RoleAtLeast(who.role, need) {
			writeError(w, api.Errorf(api.CodeForbidden, "%s needs the %s role; %s has %s", pattern, need, who.principal, who.role))
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			if u, err := url.Parse(o); err != nil || u.Host != r.Host {
				writeError(w, api.Errorf(api.CodeForbidden, "cross-origin request from %q refused", o))
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(withCaller(r.Context(), who)))
	})
}

// noRoute answers a request that matches no route: 405 when another method would
// match the path, 404 otherwise.
func (c *Controller) noRoute(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete} {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, p := mux.Handler(r2); p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeErrorStatus(w, http.StatusMethodNotAllowed, api.Errorf(api.CodeBadRequest, "method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	writeError(w, api.Errorf(api.CodeNotFound, "no route %s %s (see DESIGN.md: /v1/nodes, /v1/sessions, /v1/run, /healthz, /metrics)", r.Method, r.URL.Path))
}

// openAPI serves the API's OpenAPI document (api/openapi.yaml).
func openAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/yaml")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(api.OpenAPI)
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return strings.Trim(h, "[]")
	}
	return strings.Trim(hostport, "[]")
}

// apiError turns any error into the *api.Error a user sees; what is not one is
// logged for the operator and shown as a generic internal error.
func (c *Controller) apiError(r *http.Request, err error) *api.Error {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, context.Canceled) && c.ctx.Err() != nil:
		return api.Errorf(api.CodeUnavailable, "the controller is shutting down")
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return api.Errorf(api.CodeTimeout, "request cancelled")
	}
	c.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	return api.Errorf(api.CodeInternal, "internal error (details in the controller's log)")
}

func writeError(w http.ResponseWriter, e *api.Error) { writeErrorStatus(w, api.HTTPStatus(e.Code), e) }

func writeErrorStatus(w http.ResponseWriter, code int, e *api.Error) {
	noteError(w, e.Code)
	writeJSON(w, code, api.ErrorReply{Error: e})
}

// rawJSON is a JSON object written as it is (a node's reply passed on).
type rawJSON []byte

func writeJSON(w http.ResponseWriter, code int, v any) {
	var b []byte
	var err error
	if raw, ok := v.(rawJSON); ok {
		b = slices.Clip(raw) // the newline below must not write into the caller's array
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		code = http.StatusInternalServerError
		noteError(w, api.CodeInternal)
		b, _ = json.Marshal(api.ErrorReply{Error: api.Errorf(api.CodeInternal, "reply not encodable")})
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b))) // so a Flush before the handler returns need not chunk it
	w.WriteHeader(code)
	w.Write(b)
}

// reply writes v, or the error.
func (c *Controller) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		writeError(w, c.apiError(r, err))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// decodeBody decodes a JSON body into v: a JSON content type, at most
// api.MaxBodyBytes, no unknown fields, one value.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return api.Errorf(api.CodeBadRequest, "content type %q: send application/json", ct)
		}
	} else {
		return api.Errorf(api.CodeBadRequest, "no content type: send application/json")
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return api.Errorf(api.CodeTooLarge, "request body over %d bytes", api.MaxBodyBytes)
		}
		if errors.Is(err, io.EOF) {
			return api.Errorf(api.CodeBadRequest, "empty request body: want a JSON object")
		}
		return api.Errorf(api.CodeBadRequest, "malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return api.Errorf(api.CodeTooLarge, "request body over %d bytes", api.MaxBodyBytes)
		}
		return api.Errorf(api.CodeBadRequest, "malformed JSON body: more than one value")
	}
	return nil
}

// actor names who made a request, for the nodes' audit records: the API user (a
// client-chosen label, bounded and cleaned) and the remote address.
func actor(r *http.Request) string {
	who := r.Header.Get(api.HeaderActor)
	if len(who) > 64 {
		who = who[:64]
	}
	who = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, who)
	if who == "" {
		who = "api"
	}
	host := hostOnly(r.RemoteAddr)
	return who + "@" + host
}

// httpPrincipal is who an HTTP API request acts as: its API token (guard put the
// caller in its context) and role, and its actor label. A request guard did not
// authenticate has no principal, and the node requests it makes are not signed.
func httpPrincipal(r *http.Request) principal {
	who := callerOf(r.Context())
	return principal{actor: actor(r), id: who.principal, role: who.role}
}

// target validates the {node} and {id} of a session route.
func target(r *http.Request) (node, id string, err error) {
	node, id = r.PathValue("node"), r.PathValue("id")
	if err := api.ValidName(node); err != nil {
		return "", "", api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	if err := api.ValidName(id); err != nil {
		return "", "", api.Errorf(api.CodeBadRequest, "session: %v", err)
	}
	return node, id, nil
}

// queryInt reads an optional non-negative integer query parameter.
func queryInt(r *http.Request, name string) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return 0, nil
	}
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil || v < 0 || fmt.Sprint(v) != s {
		return 0, api.Errorf(api.CodeBadRequest, "query %s=%q: want a non-negative integer", name, s)
	}
	return v, nil
}

// slogPrinter adapts the controller's logger to promhttp's error log.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics", "err", fmt.Sprint(v...)) }

// timeoutFor is a request timeout for a verb that waits ms on the node.
func (c *Controller) timeoutFor(ms int) time.Duration { return c.waitBudget(ms, api.DefaultWait) }
