package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/fleetmux/fleetmux/api"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Public is the role of a route that needs no token (health). Every other row
// of the table names one of api.Roles.
const Public = "public"

// Route is one row of the route table: a route the API serves, the least role it
// needs, and its handler.
type Route struct {
	Method string // GET, POST, …; "" for every method (/mcp, which checks each tool call)
	Path   string // a net/http ServeMux path pattern
	Role   string // the least role a request's token needs: api.RoleViewer, RoleOperator, RoleAdmin, or Public
	serve  func(s *Server, w http.ResponseWriter, r *http.Request)
}

// Pattern is the route's net/http ServeMux pattern ("GET /v1/nodes").
func (rt Route) Pattern() string {
	if rt.Method == "" {
		return rt.Path
	}
	return rt.Method + " " + rt.Path
}

const session = "/v1/sessions/{node}/{id}"

// table is the one route table: the mux serves these rows and no other route,
// guard checks each request's token against its row's role, and a test checks
// every row against api/openapi.yaml (and the document against the table).
var table = []Route{
	{"GET", "/healthz", Public, (*Server).health},
	{"GET", "/metrics", api.RoleViewer, (*Server).serveMetrics},
	{"GET", "/v1/nodes", api.RoleViewer, (*Server).listNodes},
	{"GET", "/v1/sessions", api.RoleViewer, (*Server).listSessions},
	{"POST", "/v1/sessions", api.RoleOperator, (*Server).createSession},
	{"GET", session, api.RoleViewer, (*Server).getSession},
	{"PATCH", session, api.RoleOperator, (*Server).patchSession},
	{"DELETE", session, api.RoleOperator, (*Server).deleteSession}, // the node checks the owner (or admin)
	{"POST", session + "/run", api.RoleOperator, (*Server).runCommand},
	{"POST", session + "/input", api.RoleOperator, (*Server).input},
	{"POST", session + "/keys", api.RoleOperator, (*Server).keys},
	{"POST", session + "/resize", api.RoleOperator, (*Server).resize},
	{"POST", session + "/take_over", api.RoleOperator, (*Server).takeOver},
	{"GET", session + "/screen", api.RoleViewer, (*Server).screen},
	{"GET", session + "/blocks", api.RoleViewer, (*Server).blocks},
	{"GET", session + "/blocks/{n}", api.RoleViewer, (*Server).block},
	{"GET", session + "/output", api.RoleViewer, (*Server).output},
	{"GET", session + "/wait", api.RoleViewer, (*Server).wait},
	{"GET", session + "/attach", api.RoleViewer, (*Server).attach}, // typing needs operator: the node checks input
	{"GET", session + "/live", api.RoleViewer, (*Server).live},     // read-only: players (v1.alis, v3.asciicast)
	{"GET", session + "/recording", api.RoleViewer, (*Server).recording},
	{"POST", "/v1/run", api.RoleOperator, (*Server).fanout},
	{"POST", "/v1/exec", api.RoleOperator, (*Server).execRun},
	{"GET", execPath, api.RoleViewer, (*Server).getExec},
	{"DELETE", execPath, api.RoleOperator, (*Server).killExec}, // the node checks the owner (or admin)
	{"GET", execPath + "/wait", api.RoleViewer, (*Server).waitExec},
	{"GET", execPath + "/output", api.RoleViewer, (*Server).execOutput},
	{"GET", "/v1/digest", api.RoleViewer, (*Server).digest},
	{"GET", "/v1/events", api.RoleViewer, (*Server).events}, // what changed, never its content
	{"GET", "/v1/agents", api.RoleViewer, (*Server).listAgents},
	{"POST", "/v1/agents", api.RoleOperator, (*Server).spawnAgent},
	{"GET", agentPath, api.RoleViewer, (*Server).getAgent},
	{"DELETE", agentPath, api.RoleOperator, (*Server).killAgent}, // the node checks the owner (or admin)
	{"POST", agentPath + "/send", api.RoleOperator, (*Server).sendAgent},
	{"POST", agentPath + "/interrupt", api.RoleOperator, (*Server).interruptAgent},
	{"GET", agentPath + "/wait", api.RoleViewer, (*Server).waitAgent},
	{"GET", agentPath + "/output", api.RoleViewer, (*Server).agentOutput},
	{"GET", "/v1/approvals", api.RoleViewer, (*Server).listApprovals},
	{"GET", "/v1/approvals/{node}/{id}", api.RoleViewer, (*Server).getApproval},
	{"POST", "/v1/approvals/{node}/{id}", api.RoleOperator, (*Server).decideApproval}, // the node checks the approval's approvers (admin by default)
	{"GET", "/v1/tokens", api.RoleAdmin, (*Server).listTokens},
	{"POST", "/v1/tokens", api.RoleAdmin, (*Server).createToken},
	{"DELETE", "/v1/tokens/{name}", api.RoleAdmin, (*Server).revokeToken},
	{"GET", "/v1/policy", api.RoleOperator, (*Server).getPolicy}, // the rules one works under; no secrets
	{"PUT", "/v1/policy", api.RoleAdmin, (*Server).putPolicy},
	{"DELETE", "/v1/policy", api.RoleAdmin, (*Server).deletePolicy},
	{"GET", "/v1/nodes/{node}/secrets", api.RoleAdmin, (*Server).listSecrets},
	{"PUT", "/v1/nodes/{node}/secrets/{name}", api.RoleAdmin, (*Server).putSecret},
	{"DELETE", "/v1/nodes/{node}/secrets/{name}", api.RoleAdmin, (*Server).deleteSecret},
	{"GET", "/v1/openapi.yaml", api.RoleViewer, (*Server).openAPI},
	{"", "/mcp", api.RoleViewer, (*Server).serveMCP}, // each tool call is checked against api.Tools

	// The web console (console.go): its files are public (they hold no data; a
	// page fetches everything from the API with its cookie); sign-in checks the
	// token it is given; the rest needs a sign-in.
	{"GET", "/{$}", Public, (*Server).consoleRoot},
	{"GET", "/ui/{path...}", Public, (*Server).consolePage},
	{"POST", "/ui/signin", Public, (*Server).signIn},
	{"POST", "/ui/signout", api.RoleViewer, (*Server).signOut},
	{"GET", "/ui/me", api.RoleViewer, (*Server).me},
	{"POST", "/ui/links", api.RoleViewer, (*Server).newLink}, // a bearer token only: the link acts with it
}

// ConsoleRoute reports whether a route pattern is one of the web console's (not
// part of the JSON API nor its OpenAPI document).
func ConsoleRoute(pattern string) bool {
	_, path, ok := strings.Cut(pattern, " ")
	if !ok {
		path = pattern
	}
	return path == "/{$}" || strings.HasPrefix(path, "/ui/")
}

// Routes returns the route table: every route the API serves, in table order.
func Routes() []Route { return slices.Clone(table) }

// Access is the access table, made from the route table: each route's pattern
// and the least role it needs (Public: none).
func Access() map[string]string {
	out := make(map[string]string, len(table))
	for _, rt := range table {
		out[rt.Pattern()] = rt.Role
	}
	return out
}

// build makes the API's handler from the route table. Every reply is JSON (but
// output, metrics and the OpenAPI document); errors are api.ErrorReply. Every
// routed request is timed (metrics, innermost: the audit's record is not the
// request's time) and, when its route mutates, audited (middleware.go).
func (s *Server) build() (http.Handler, error) {
	mux := http.NewServeMux()
	s.roles = map[string]string{}
	for _, rt := range table {
		if rt.Role != Public && !slices.Contains(api.Roles, rt.Role) {
			return nil, fmt.Errorf("%w: route %s: role %q is not one of %v or %s", ErrConfig, rt.Pattern(), rt.Role, api.Roles, Public)
		}
		serve := rt.serve
		mux.HandleFunc(rt.Pattern(), func(w http.ResponseWriter, r *http.Request) { serve(s, w, r) })
		s.roles[rt.Pattern()] = rt.Role
	}
	s.promH = promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.log}})
	s.mcpH = s.mountMCP()
	return traced(mux, s.guard(mux, s.audit(s.metrics.middleware(mux)))), nil
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) { s.promH.ServeHTTP(w, r) }

// guard checks what every request must pass before routing: a known route (JSON
// 404/405 otherwise), an API token whose role reaches the route's row, and the browser defences (a request
// from a web page must not reach a loopback API: cross-site requests). Requests
// that pass go to next (the mux behind its middlewares), with their caller in
// their context.
func (s *Server) guard(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w.Header())
		if q := r.URL.Query(); q.Has("token") || q.Has("access_token") {
			writeError(w, api.Errorf(api.CodeBadRequest, "an API token never goes in a URL: send it in the Authorization header (or sign in to the console with a form)"))
			return
		}
		_, pattern := mux.Handler(r)
		if pattern == "" {
			s.noRoute(w, r, mux)
			return
		}
		need, listed := s.roles[pattern]
		if !listed {
			s.log.Error("route missing from the route table: refused", "route", pattern)
			writeError(w, api.Errorf(api.CodeForbidden, "route %s has no role in the access table", pattern))
			return
		}
		if need == Public {
			next.ServeHTTP(w, r)
			return
		}
		who, aerr := s.authenticate(r)
		if aerr != nil {
			w.Header().Set("WWW-Authenticate", api.BearerChallenge) // a token, no OAuth flow
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
		if who.cookie != nil {
			if berr := checkBrowser(r, who.cookie); berr != nil {
				writeError(w, berr)
				return
			}
		}
		ctx := s.fleet.WithCaller(context.WithValue(r.Context(), callerKey{}, who), actor(r), who.principal, who.role)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// noRoute answers a request that matches no route: 405 when another method would
// match the path, 404 otherwise (saying there is no OAuth on the paths an OAuth
// client asks for: api.OAuthPath).
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete} {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, p := mux.Handler(r2); p != "" {
			allow = append(allow, m)
		}
	}
	if api.OAuthPath(r.URL.Path) {
		writeError(w, api.Errorf(api.CodeNotFound, "%s", api.NoOAuth))
		return
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeErrorStatus(w, http.StatusMethodNotAllowed, api.Errorf(api.CodeBadRequest, "method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	writeError(w, api.Errorf(api.CodeNotFound, "no route %s %s (the routes: GET /v1/openapi.yaml, docs/api.md)", r.Method, r.URL.Path))
}

// openAPI serves the API's OpenAPI document (api/openapi.yaml).
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/yaml")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(api.OpenAPI)
}
