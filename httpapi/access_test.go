package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/trust"
)

// Roles everywhere (DESIGN.md, Trust model): the route table and api.Tools walked with
// a real token of every role, over real HTTP.

// newToken creates a token through the API (as the fixture's token) and returns
// its text.
func (f *fixture) newToken(name, role, ttl string) string {
	f.T.Helper()
	var nt api.NewToken
	f.Must(http.StatusOK, "POST", "/v1/tokens", api.TokenRequest{Name: name, Role: role, TTL: ttl}, &nt)
	if nt.Secret == "" || nt.Name != name || nt.Role != role {
		f.T.Fatalf("created token: %+v", nt)
	}
	return nt.Secret
}

// as runs fn with the fixture's requests made with token.
func (f *fixture) as(token string, fn func()) {
	old := f.Token
	f.Token = token
	defer func() { f.Token = old }()
	fn()
}

// doStatus is Do for the walk: a stream that never ends (GET /v1/events) is
// left once its reply's status is in.
func (f *fixture) doStatus(method, path string, body any, hdr ...string) (int, []byte) {
	f.T.Helper()
	if path != "/v1/events" {
		return f.Do(method, path, body, hdr...)
	}
	req, _ := http.NewRequest(method, f.Base+path, nil)
	if f.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.Token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.T.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, nil
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// routeCase is how a route is called in the walk: its path and a body that
// changes nothing when the route is allowed (an unknown session or node, a bad
// token request).
func routeCase(pattern string) (method, path string, body any) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	path = strings.NewReplacer("{node}", "n1", "{id}", "s999", "{n}", "1", "{name}", "nobody", "{$}", "", "{path...}", "fleet").Replace(path)
	switch pattern {
	case "POST /v1/sessions":
		body = api.NewSession{Node: "nope"}
	case "POST /v1/run":
		body = api.FanoutRequest{Command: "true", Selector: api.Selector{Nodes: []string{"nope"}}}
	case "POST /v1/tokens":
		body = api.TokenRequest{Name: "bad.name", Role: api.RoleViewer}
	case "PATCH /v1/sessions/{node}/{id}":
		body = api.SessionPatch{}
	case "POST /v1/sessions/{node}/{id}/run":
		body = api.RunBody{Command: "true"}
	case "POST /v1/sessions/{node}/{id}/input":
		body = api.InputRequest{Data: "x"}
	case "POST /v1/sessions/{node}/{id}/keys":
		body = api.KeysRequest{Keys: []string{"Enter"}}
	case "POST /v1/sessions/{node}/{id}/resize":
		body = api.ResizeRequest{Cols: 80, Rows: 24}
	case "/mcp":
		method = "POST"
		body = []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	}
	return method, path, body
}

// TestAccessRoutes: every route of the route table with a token of every role: a role
// below the route's is refused (403), one at or above it passes the guard; no
// token, a wrong one, a revoked one are refused (401); the table names exactly
// the controller's routes.
func TestAccessRoutes(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	tokens := map[string]string{}
	for _, role := range api.Roles {
		tokens[role] = f.newToken("t-"+role, role, "")
	}
	for pattern, need := range httpapi.Access() {
		method, path, body := routeCase(pattern)
		hdr := []string{"Accept", "application/json, text/event-stream"}
		for _, role := range api.Roles {
			f.as(tokens[role], func() {
				code, b := f.doStatus(method, path, body, hdr...)
				var env api.ErrorReply
				json.Unmarshal(b, &env)
				allowed := need == httpapi.Public || api.RoleAtLeast(role, need)
				switch {
				case code == http.StatusUnauthorized:
					t.Errorf("%s as %s: 401 with a valid token: %s", pattern, role, b)
				case !allowed && (code != http.StatusForbidden || env.Error == nil || !strings.Contains(env.Error.Message, "needs the "+need+" role")):
					t.Errorf("%s as %s (needs %s): %d %s, want 403", pattern, role, need, code, b)
				case allowed && code == http.StatusForbidden:
					t.Errorf("%s as %s (needs %s): refused: %s", pattern, role, need, b)
				case env.Error != nil && strings.HasPrefix(env.Error.Message, "no route"):
					t.Errorf("%s: in the route table but not served: %s", pattern, b)
				}
			})
		}
		if need == httpapi.Public {
			continue
		}
		for name, auth := range map[string]string{"no token": "", "wrong token": "Bearer " + tokens[api.RoleAdmin] + "x", "not bearer": "Basic " + tokens[api.RoleAdmin]} {
			f.as("", func() {
				code, b := f.doStatus(method, path, body, append(hdr, "Authorization", auth)...)
				if code != http.StatusUnauthorized {
					t.Errorf("%s with %s: %d %s, want 401", pattern, name, code, b)
				}
			})
		}
	}
	// The access table is the route table's: one row per pattern, each with a role
	// (the mux serves the table's rows and no other route).
	if a, r := httpapi.Access(), httpapi.Routes(); len(a) != len(r) {
		t.Errorf("access table of %d routes, route table of %d rows: a pattern is listed twice", len(a), len(r))
	}
	public := slices.DeleteFunc(slices.Collect(maps.Keys(httpapi.Access())), func(p string) bool { return httpapi.Access()[p] != httpapi.Public })
	slices.Sort(public)
	if want := []string{"GET /healthz", "GET /ui/{path...}", "GET /{$}", "POST /ui/signin"}; !slices.Equal(public, want) {
		t.Errorf("public routes %v, want only %v", public, want)
	}
	// A viewer cannot manage tokens; an admin lists them (never their secrets).
	var list api.TokenList
	f.as(tokens[api.RoleAdmin], func() { f.Must(http.StatusOK, "GET", "/v1/tokens", nil, &list) })
	if len(list.Tokens) != 3 || list.Tokens[0].Name != "t-admin" || list.Tokens[0].CreatedBy != "token:bootstrap" {
		t.Errorf("token list: %+v", list)
	}
	f.as(tokens[api.RoleAdmin], func() {
		f.APIErr(http.StatusConflict, api.CodeExists, "POST", "/v1/tokens", api.TokenRequest{Name: "t-viewer", Role: api.RoleAdmin}, nil...)
		f.APIErr(http.StatusBadRequest, api.CodeBadRequest, "POST", "/v1/tokens", api.TokenRequest{Name: "bootstrap", Role: api.RoleAdmin}, nil...)
		f.APIErr(http.StatusBadRequest, api.CodeBadRequest, "POST", "/v1/tokens", api.TokenRequest{Name: "x", Role: "root"}, nil...)
		f.APIErr(http.StatusBadRequest, api.CodeBadRequest, "POST", "/v1/tokens", api.TokenRequest{Name: "x", Role: api.RoleViewer, TTL: "-1h"}, nil...)
		f.Must(http.StatusOK, "DELETE", "/v1/tokens/t-operator", nil, nil)
	})
	f.as(tokens[api.RoleOperator], func() {
		f.APIErr(http.StatusUnauthorized, api.CodeUnauthorized, "GET", "/v1/nodes", nil)
	})
}

// TestAccessTools: every MCP tool over /mcp with a token of every role: a role
// below the tool's (api.Tools) gets a tool error naming the role it needs, one at
// or above it gets past the check.
func TestAccessTools(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	args := map[string]map[string]any{
		"list_nodes":        {},
		"list_sessions":     {},
		"read_screen":       {"node": "n1", "session": "s999"},
		"read_block":        {"node": "n1", "session": "s999", "n": 1},
		"wait_for":          {"node": "n1", "session": "s999", "timeout_ms": 100},
		"create_session":    {"node": "nope"},
		"run_command":       {"node": "n1", "session": "s999", "command": "true"},
		"send_input":        {"node": "n1", "session": "s999", "text": "x"},
		"send_keys":         {"node": "n1", "session": "s999", "keys": []string{"Enter"}},
		"set_session_info":  {"node": "n1", "session": "s999", "title": "t"},
		"fanout_run":        {"nodes": []string{"nope"}, "command": "true"},
		"close_session":     {"node": "n1", "session": "s999"},
		"list_agents":       {},
		"wait_for_agent":    {"node": "n1", "agent": "s999", "timeout_ms": 100},
		"read_agent_output": {"node": "n1", "agent": "s999"},
		"spawn_agent":       {"node": "nope", "driver": "claude"},
		"send_to_agent":     {"node": "n1", "agent": "s999", "text": "hi"},
		"interrupt_agent":   {"node": "n1", "agent": "s999"},
		"kill_agent":        {"node": "n1", "agent": "s999"},
		"exec":              {"node": "nope", "argv": []string{"true"}},
		"catch_up":          {"node": "nope"},
	}
	for _, role := range api.Roles {
		token := f.newToken("t-"+role, role, "")
		var c *mcpc
		f.as(token, func() { c = mcpHTTP(t, f) })
		tools, err := c.cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(tools.Tools) != len(api.Tools) {
			t.Errorf("%d tools served, %d in api.Tools", len(tools.Tools), len(api.Tools))
		}
		for _, tool := range tools.Tools {
			need, ok := api.Tools[tool.Name]
			if !ok {
				t.Errorf("tool %s has no role in api.Tools", tool.Name)
				continue
			}
			a, ok := args[tool.Name]
			if !ok {
				t.Fatalf("no test arguments for tool %s", tool.Name)
			}
			res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool.Name, Arguments: a})
			if err != nil {
				t.Fatalf("%s: %v", tool.Name, err)
			}
			text := ""
			for _, ct := range res.Content {
				if tc, ok := ct.(*mcp.TextContent); ok {
					text += tc.Text
				}
			}
			refused := res.IsError && strings.Contains(text, "needs the "+need+" role; you act as token:t-"+role)
			if allowed := api.RoleAtLeast(role, need); allowed == refused {
				t.Errorf("%s as %s (needs %s): refused %v: %s", tool.Name, role, need, refused, text)
			}
		}
	}
}

// TestTokensTwoControllers: two controllers on one NATS share the token store: a
// token made on one works on the other; revoked on the other, it is refused by
// both at once; an expired token is refused by both.
func TestTokensTwoControllers(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	ctx := context.Background()
	conn2, err := transport.Connect(ctx, transport.NATSConfig{URL: f.NATS.ClientURL(), Name: "ctl2", Logger: stack.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn2.Close() })
	kv2, err := transport.OpenKV(ctx, conn2.NC(), api.BucketTokens, stack.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctl2, err := controller.New(controller.Config{Name: "ctl2", Bus: conn2, Signer: f.Trust.Signer, Tokens: kv2, Logger: stack.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	api2 := stack.StartAPI(t, ctl2, nil, func() { ctl2.Close() })
	f2 := &fixture{&stack.Stack{T: t, Ctl: ctl2, API: api2, Base: "http://" + api2.Addr(), HTTP: f.HTTP}}

	status := func(f *fixture, token string) int {
		var code int
		f.as(token, func() { code, _ = f.Do("GET", "/v1/nodes", nil) })
		return code
	}
	ops := f.newToken("ops", api.RoleAdmin, "")
	if status(f, ops) != http.StatusOK {
		t.Fatal("a new token is refused by the controller that made it")
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return status(f2, ops) == http.StatusOK }, "the other controller to accept the token")
	f2.as(ops, func() { f2.Must(http.StatusOK, "DELETE", "/v1/tokens/ops", nil, nil) })
	if status(f2, ops) != http.StatusUnauthorized {
		t.Fatal("a revoked token still works on the controller that revoked it")
	}
	testutil.Eventually(t, 2*time.Second, func() bool { return status(f, ops) == http.StatusUnauthorized }, "the first controller to refuse the revoked token")

	short := f.newToken("short", api.RoleViewer, "1500ms")
	testutil.Eventually(t, 5*time.Second, func() bool { return status(f2, short) == http.StatusOK }, "the other controller to accept the short token")
	testutil.Eventually(t, 5*time.Second, func() bool {
		return status(f, short) == http.StatusUnauthorized && status(f2, short) == http.StatusUnauthorized
	}, "both controllers to refuse the expired token")

	// A record written to the bucket by hand with a weak hash or a forged role for
	// another token's name gives nothing: the hash is of the whole token text.
	if status(f, "fmx1.ops.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA") != http.StatusUnauthorized {
		t.Fatal("a guessed token was accepted")
	}
}

// TestAuditNamesPrincipal (issue 15 #12, review #4): a client with an operator
// token that labels itself "admin" or "mcp-human:alice" via Fleetmux-Actor is
// recorded as what it is, by the controller and by the node (from the signed
// envelope): the principal is its token, the label stays a label.
func TestAuditNamesPrincipal(t *testing.T) {
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true,
		Config: func(c *controller.Config) { c.AuditFile = audit }})
	ops := f.newToken("ops", api.RoleOperator, "")
	nodeRecs := make(chan api.AuditRecord, 16)
	stop, err := f.Bus.Subscribe(api.Subjects{}.Audit("n1"), func(_ string, _ map[string]string, data []byte) {
		var r api.AuditRecord
		if json.Unmarshal(data, &r) == nil {
			select {
			case nodeRecs <- r:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	f.as(ops, func() {
		f.Do("POST", "/v1/sessions", api.NewSession{Node: "nope"}, api.HeaderActor, "admin")
		// Review #4: the client names itself a person; the node must still know
		// it is token:ops (its policy matches the principal, not this label).
		if code, body := f.Do("POST", "/v1/sessions", api.NewSession{Node: "n1"}, api.HeaderActor, "mcp-human:alice"); code != http.StatusCreated {
			t.Fatalf("create: %d %s", code, body)
		}
	})
	// The node records the signed principal, and the label apart.
	select {
	case r := <-nodeRecs:
		if r.Principal != "token:ops" || r.Actor != "mcp-human:alice@127.0.0.1" || r.Role != api.RoleOperator {
			t.Errorf("node audit record %+v: want principal token:ops, the label mcp-human:alice@127.0.0.1 apart, role operator", r)
		}
	case <-time.After(10 * time.Second):
		t.Error("no audit record from the node")
	}
	var rec api.AuditRecord
	testutil.Eventually(t, 5*time.Second, func() bool {
		fh, err := os.Open(audit)
		if err != nil {
			return false
		}
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var r api.AuditRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Action == "POST /v1/sessions" {
				rec = r
				return true
			}
		}
		return false
	}, "the audit record of the create")
	if rec.Principal != "token:ops" || !regexp.MustCompile(`^admin@`).MatchString(rec.Actor) {
		t.Fatalf("audit record %+v: want principal token:ops beside the label admin@…", rec)
	}
}

// TestBootstrapTokenKeepsWorking: a stored token that takes the bootstrap token's
// name (dev's is "fmx1.dev.…") does not lock the bootstrap token out.
func TestBootstrapTokenKeepsWorking(t *testing.T) {
	boot, _, err := trust.NewToken("dev", api.RoleAdmin, 0, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{}, Token: boot, Store: true})
	other := f.newToken("dev", api.RoleViewer, "")
	f.Must(http.StatusOK, "GET", "/v1/tokens", nil, nil)
	f.as(other, func() { f.APIErr(http.StatusForbidden, api.CodeForbidden, "GET", "/v1/tokens", nil) })
}
