package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// loadOpenAPI loads and validates api/openapi.yaml as OpenAPI 3.1.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() || doc.IsOpenAPI32OrLater() {
		t.Fatalf("api/openapi.yaml is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("api/openapi.yaml is not valid: %v", err)
	}
	return doc
}

// docOps lists the operations of doc as "METHOD /path".
func docOps(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIErrorCodes checks the document's error codes and their statuses against
// api's codes and their HTTP statuses (api.HTTPStatus).
func TestOpenAPIErrorCodes(t *testing.T) {
	doc := loadOpenAPI(t)
	s := doc.Components.Schemas["Error"].Value
	var enum []string
	for _, v := range s.Properties["code"].Value.Enum {
		enum = append(enum, v.(string))
	}
	codes := api.ErrorCodes()
	slices.Sort(enum)
	slices.Sort(codes)
	if !slices.Equal(enum, codes) {
		t.Errorf("Error.code enum %v, want api's codes %v", enum, codes)
	}
	statuses, _ := s.Extensions["x-fleetmux-status"].(map[string]any)
	for _, c := range codes {
		got, ok := statuses[c].(float64)
		if want := api.HTTPStatus(c); !ok || int(got) != want {
			t.Errorf("x-fleetmux-status of %s = %v, want %d (api.HTTPStatus)", c, statuses[c], want)
		}
	}
	if len(statuses) != len(codes) {
		t.Errorf("x-fleetmux-status has %d codes, want %d: %v", len(statuses), len(codes), statuses)
	}
}

// validator is an http.RoundTripper that checks every request and reply against the
// OpenAPI document, and counts which operations answered with which statuses.
type validator struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	next   http.RoundTripper

	mu   sync.Mutex
	seen map[string][]int // "METHOD /path" (the document's) → statuses
}

func newValidator(t *testing.T, doc *openapi3.T) *validator {
	doc.Servers = nil // match any host: the fixture's port is random
	// A recording is newline-delimited JSON, checked as an opaque string here (the
	// replay package checks its format).
	openapi3filter.RegisterBodyDecoder(api.RecordingContentType, openapi3filter.FileBodyDecoder)
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &validator{t: t, doc: doc, router: r, next: http.DefaultTransport, seen: map[string][]int{}}
}

func (v *validator) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rbody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(rbody))
	if err != nil {
		return resp, nil // a cut stream: the caller sees the short body
	}
	what := req.Method + " " + req.URL.RequestURI()
	route, params, ferr := v.router.FindRoute(req)
	if ferr != nil {
		// No documented route: the reply must be the documented error shape.
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			v.t.Errorf("%s: not in the document (%v) but answered %d", what, ferr, resp.StatusCode)
		}
		v.checkError(what, rbody)
		return resp, nil
	}
	op := req.Method + " " + route.Path
	v.mu.Lock()
	v.seen[op] = append(v.seen[op], resp.StatusCode)
	v.mu.Unlock()
	if route.Path == "/mcp" {
		return resp, nil // the MCP protocol's own messages
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req.Clone(req.Context()), PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	in.Request.Body = io.NopCloser(bytes.NewReader(body))
	if resp.StatusCode < 400 {
		// Requests the controller refuses may be outside the schema on purpose.
		if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
			v.t.Errorf("%s: the request does not match the document: %v", what, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body:    io.NopCloser(bytes.NewReader(rbody)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		v.t.Errorf("%s: reply %d does not match the document: %v\n%.600s", what, resp.StatusCode, err, rbody)
	}
	if resp.StatusCode >= 400 {
		v.checkError(what, rbody)
	}
	return resp, nil
}

// checkError checks an error body against the ErrorReply schema.
func (v *validator) checkError(what string, body []byte) {
	var x any
	if err := json.Unmarshal(body, &x); err != nil {
		v.t.Errorf("%s: error reply is not JSON: %.200s", what, body)
		return
	}
	if err := v.doc.Components.Schemas["ErrorReply"].Value.VisitJSON(x, openapi3.EnableJSONSchema2020()); err != nil {
		v.t.Errorf("%s: error reply does not match ErrorReply: %v: %.200s", what, err, body)
	}
}

// TestOpenAPI checks api/openapi.yaml against the controller: every route the
// router serves is documented, every documented operation exists, and real replies
// of every route (from a real node) match their schemas.
func TestOpenAPI(t *testing.T) {
	doc := loadOpenAPI(t)
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": {"role": "web"}}, Store: true, Policy: true})

	// The router's routes and the document's operations are the same set.
	ops := docOps(doc)
	var routes []string
	for _, rt := range httpapi.Routes() {
		p := rt.Pattern()
		if httpapi.ConsoleRoute(p) {
			continue // the web console's pages and sign-in: not the JSON API
		}
		method, path, ok := strings.Cut(p, " ")
		if !ok { // a pattern for every method: the document must list some
			path = p
			found := false
			for _, op := range ops {
				found = found || strings.HasSuffix(op, " "+path)
			}
			if !found {
				t.Errorf("route %q (any method) is not in api/openapi.yaml", p)
			}
			continue
		}
		routes = append(routes, method+" "+path)
		if !slices.Contains(ops, method+" "+path) {
			t.Errorf("route %q is not in api/openapi.yaml", p)
		}
	}
	for _, op := range ops {
		if !slices.Contains(routes, op) && !strings.HasSuffix(op, " /mcp") {
			t.Errorf("api/openapi.yaml documents %q, which the controller does not serve", op)
		}
	}

	v := newValidator(t, doc)
	f.HTTP.Transport = v
	f.exerciseAll(t)

	// Every operation answered, and every one but the WebSocket and MCP's with success.
	for _, op := range ops {
		st := v.seen[op]
		if len(st) == 0 {
			t.Errorf("%s: never exercised", op)
			continue
		}
		switch op {
		case "GET /v1/sessions/{node}/{id}/attach", "GET /v1/sessions/{node}/{id}/live", "GET /mcp", "DELETE /mcp",
			"GET /v1/events": // a stream that never ends (TestEventsStream reads it)
			continue
		}
		if !slices.ContainsFunc(st, func(s int) bool { return s < 300 }) {
			t.Errorf("%s: no successful reply validated (statuses %v)", op, st)
		}
	}
}

// exerciseAll sends a request to every route, successful and failing ones (the
// validator checks them).
func (f *fixture) exerciseAll(t *testing.T) {
	var nodes api.NodeList
	f.Must(200, "GET", "/v1/nodes", nil, &nodes)
	var s api.Session
	f.Must(201, "POST", "/v1/sessions", api.NewSession{Node: "n1", CreateRequest: api.CreateRequest{
		Title: "t", Labels: map[string]string{"team": "a"}, Shell: "bash", Cols: 100, Rows: 30}}, &s)
	p := "/v1/sessions/" + s.Node + "/" + s.ID
	f.Must(200, "GET", p+"/wait?until=idle&timeout_ms=10000", nil, nil)
	f.Must(200, "GET", "/v1/sessions?node=n1&label=role=web&label=team=a", nil, nil)
	f.Must(200, "GET", p, nil, nil)
	f.Must(200, "PATCH", p, map[string]any{"title": "t2", "description": "d"}, nil)
	f.Must(200, "POST", p+"/run", api.RunBody{Command: "echo hi; (exit 3)", TimeoutMS: 20000, MaxOutputBytes: 100, IdempotencyKey: "k1"}, nil)
	f.Must(200, "POST", p+"/run", api.RunBody{Command: "sleep 5", TimeoutMS: 50}, nil) // still running
	f.APIErr(409, api.CodeBusy, "POST", p+"/run", api.RunBody{Command: "true"})
	f.Must(200, "POST", p+"/keys", api.KeysBody{Keys: []string{"C-c"}}, nil)
	f.Must(200, "GET", p+"/wait?until=idle&timeout_ms=10000", nil, nil)
	f.Must(200, "POST", p+"/input", api.InputBody{Data: "echo typed\n"}, nil)
	f.Must(200, "GET", p+"/wait?until=output&after=0&timeout_ms=100", nil, nil)
	f.Must(200, "GET", p+"/blocks", nil, nil)
	f.Must(200, "GET", p+"/blocks/1?grep=hi&offset=0&limit=5&max_bytes=-1", nil, nil)
	f.Must(200, "GET", p+"/screen", nil, nil)
	f.Must(200, "POST", p+"/resize", api.ResizeBody{Cols: 90, Rows: 20}, nil)
	f.Must(200, "POST", p+"/take_over", nil, nil)
	f.Must(200, "PUT", "/v1/nodes/n1/secrets/sudo-x", api.SecretBody{Value: "s3cret"}, nil)
	f.Must(200, "GET", "/v1/nodes/n1/secrets", nil, nil)
	f.Must(200, "DELETE", "/v1/nodes/n1/secrets/sudo-x", nil, nil)
	f.APIErr(404, api.CodeNotFound, "DELETE", "/v1/nodes/n1/secrets/sudo-x", nil)
	f.APIErr(400, api.CodeBadRequest, "PUT", "/v1/nodes/n1/secrets/sudo-x", api.SecretBody{Value: "two\nlines"})
	f.Must(200, "GET", p+"/output?from=0&max_bytes=10", nil, nil)
	var x api.ExecResult
	f.Must(200, "POST", "/v1/exec", api.ExecRequest{Node: "n1", Command: "echo out; echo err >&2; sleep 30", Background: true, TimeoutMS: 1}, &x)
	xp := "/v1/exec/n1/" + x.ExecID
	f.Must(200, "GET", xp+"?max_output_bytes=100", nil, nil)
	f.Must(200, "GET", xp+"/output?stream=stderr&from=0&max=10", nil, nil)
	f.Must(200, "DELETE", xp, nil, nil)
	f.Must(200, "GET", xp+"/wait?timeout_ms=5000&max_output_bytes=10", nil, nil)
	f.Must(200, "POST", "/v1/exec", api.ExecRequest{Selector: &api.Selector{All: true}, Argv: []string{"true"}}, nil)
	f.Must(200, "GET", "/v1/digest?scope=fleet&budget_tokens=500", nil, nil)
	f.APIErr(400, api.CodeBadRequest, "GET", p+"/attach", nil) // not a WebSocket upgrade
	f.APIErr(400, api.CodeBadRequest, "GET", p+"/live", nil)
	f.as("", func() { f.APIErr(401, api.CodeUnauthorized, "GET", "/v1/events", nil) })
	f.Must(200, "POST", "/v1/run", api.FanoutRequest{Selector: api.Selector{Nodes: []string{"n1"}}, Command: "echo fan", TimeoutMS: 20000}, nil)
	f.Must(200, "POST", "/v1/run", api.FanoutRequest{Selector: api.Selector{Sessions: []string{"n1/nope"}}, Command: "true"}, nil)
	f.Must(200, "GET", "/v1/openapi.yaml", nil, nil)
	f.Must(200, "GET", "/healthz", nil, nil)
	f.Must(200, "GET", "/metrics", nil, nil)
	code, b := f.Do("POST", "/mcp", []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`),
		"Accept", "application/json, text/event-stream")
	if code != 200 {
		t.Errorf("POST /mcp initialize: %d %s", code, b)
	}
	f.Do("GET", "/mcp", nil)
	f.Do("DELETE", "/mcp", nil)

	// A program that exits: its output followed to the end.
	var e api.Session
	f.Must(201, "POST", "/v1/sessions", api.NewSession{Node: "n1", CreateRequest: api.CreateRequest{Argv: []string{"sh", "-c", "echo bye"}}}, &e)
	ep := "/v1/sessions/" + e.Node + "/" + e.ID
	f.Must(200, "GET", ep+"/wait?until=exited&timeout_ms=10000", nil, nil)
	f.Must(200, "GET", ep+"/output?follow=1", nil, nil)
	f.Must(200, "GET", ep+"/recording", nil, nil)
	f.Must(200, "GET", p+"/recording?format=v2", nil, nil)
	f.APIErr(400, api.CodeBadRequest, "GET", p+"/recording?format=v4", nil)
	f.APIErr(404, api.CodeNotFound, "GET", "/v1/sessions/n1/nope/recording", nil)
	f.APIErr(409, api.CodeExited, "POST", ep+"/run", api.RunBody{Command: "true"})

	// An agent (the generic driver on a tiny TUI): spawned, ready, prompted, read,
	// interrupted, killed.
	var ag api.Agent
	f.Must(201, "POST", "/v1/agents", api.SpawnRequest{Node: "n1", Driver: api.DriverGeneric, Program: "sh",
		Args: []string{"-c", "printf 'READY> '; exec cat"}, Rules: "version 1\nrule prompt ready -- READY>\n", Labels: map[string]string{"team": "a"}}, &ag)
	agp := "/v1/agents/" + ag.Node + "/" + ag.ID
	var aw api.AgentWaitReply
	f.Must(200, "GET", agp+"/wait?state=ready&timeout_ms=10000", nil, &aw)
	if !aw.OK || aw.Agent.StateSource != api.SourceScreen {
		t.Errorf("agent not ready from the screen: %+v", aw.Agent)
	}
	f.Must(200, "GET", "/v1/agents", nil, nil)
	f.Must(200, "GET", "/v1/agents?node=n1", nil, nil)
	f.Must(200, "GET", agp, nil, nil)
	f.Must(200, "POST", agp+"/send", api.AgentSendBody{Text: "hello"}, nil)
	f.Must(200, "GET", agp+"/output?cursor=0&max_bytes=1000", nil, nil)
	f.Must(200, "POST", agp+"/interrupt", nil, nil)
	f.APIErr(400, api.CodeBadRequest, "GET", agp+"/wait?state=sleeping", nil)
	f.APIErr(400, api.CodeBadRequest, "POST", "/v1/agents", api.SpawnRequest{Node: "n1", Driver: "vim"})
	f.Must(200, "DELETE", agp, nil, nil)
	f.APIErr(404, api.CodeNotFound, "GET", agp, nil)

	// Errors: each checked against the document's error shape.
	f.APIErr(404, api.CodeNotFound, "GET", "/v1/sessions/n1/nope", nil)
	f.APIErr(404, api.CodeNotFound, "GET", "/v1/nope", nil)
	f.APIErr(405, api.CodeBadRequest, "PUT", "/v1/nodes", nil)
	f.APIErr(400, api.CodeBadRequest, "GET", p+"/blocks/0", nil)
	f.APIErr(400, api.CodeBadRequest, "POST", "/v1/sessions", []byte(`{"nope":1}`))
	f.APIErr(413, api.CodeTooLarge, "POST", p+"/input", []byte(`{"data":"`+strings.Repeat("x", api.MaxBodyBytes)+`"}`))
	tok := f.Token
	f.Token = ""
	f.APIErr(401, api.CodeUnauthorized, "GET", "/v1/nodes", nil)
	f.Token = tok
	f.APIErr(403, api.CodeForbidden, "GET", "/v1/nodes", nil, "Origin", "http://evil.example")

	// Tokens: a viewer's may read, not run; a name is taken once; revoked.
	var nt api.NewToken
	f.Must(200, "POST", "/v1/tokens", api.TokenRequest{Name: "watcher", Role: api.RoleViewer, TTL: "1h"}, &nt)
	f.APIErr(409, api.CodeExists, "POST", "/v1/tokens", api.TokenRequest{Name: "watcher", Role: api.RoleViewer})
	f.Must(200, "GET", "/v1/tokens", nil, nil)
	f.Token = nt.Secret
	f.Must(200, "GET", p, nil, nil)
	f.APIErr(403, api.CodeForbidden, "POST", p+"/run", api.RunBody{Command: "true"})
	f.APIErr(403, api.CodeForbidden, "POST", p+"/take_over", nil) // viewers never hold the writer lease
	f.APIErr(403, api.CodeForbidden, "GET", "/v1/nodes/n1/secrets", nil)
	f.Token = tok
	f.Must(200, "DELETE", "/v1/tokens/watcher", nil, nil)
	f.APIErr(404, api.CodeNotFound, "DELETE", "/v1/tokens/watcher", nil)

	// The policy: none, one set (YAML), a bad one refused, removed.
	f.Must(200, "GET", "/v1/policy", nil, nil)
	if code, b := f.Do("PUT", "/v1/policy", []byte("version: 1\nrules:\n  - {name: default, action: allow}\n"), "Content-Type", "application/yaml"); code != 200 {
		t.Errorf("PUT /v1/policy: %d %s", code, b)
	}
	f.Must(200, "GET", "/v1/policy", nil, nil)
	f.APIErr(400, api.CodeBadRequest, "PUT", "/v1/policy", []byte(`{"version": 1, "rules": [{"name": "x", "action": "explode"}]}`))

	// Approvals: a run held by an approve rule (409 held), listed, read, withdrawn.
	f.Must(200, "PUT", "/v1/policy", []byte(`{"version": 1, "rules": [{"name": "hold", "match": {"command": "needs-ok"}, "action": "approve"}]}`), nil)
	var held api.ErrorReply
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, b := f.Do("POST", p+"/run", api.RunBody{Command: "true # needs-ok", TimeoutMS: 5000})
		return code == 409 && json.Unmarshal(b, &held) == nil && held.Error != nil && held.Error.Approval != ""
	}, "a run held by the policy")
	ap := "/v1/approvals/" + held.Error.Approval
	f.Must(200, "GET", "/v1/approvals", nil, nil)
	f.Must(200, "GET", "/v1/approvals?state=all&node=n1", nil, nil)
	f.Must(200, "GET", ap+"?wait_ms=10", nil, nil)
	f.APIErr(403, api.CodeForbidden, "POST", ap, api.DecideBody{Decision: api.DecisionApprove}) // who asked never approves
	f.Must(200, "POST", ap, api.DecideBody{Decision: api.DecisionDeny, Reason: "withdrawn"}, nil)
	f.APIErr(410, api.CodeGone, "POST", ap, api.DecideBody{Decision: api.DecisionDeny})
	f.APIErr(404, api.CodeNotFound, "GET", "/v1/approvals/n1/a999", nil)
	f.APIErr(400, api.CodeBadRequest, "GET", "/v1/approvals?state=maybe", nil)
	f.Must(200, "DELETE", "/v1/policy", nil, nil)

	f.Must(200, "DELETE", p, nil, nil)
	f.Must(200, "DELETE", ep, nil, nil)
}
