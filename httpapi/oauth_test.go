package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestNoOAuth: /mcp without a token answers 401 with a WWW-Authenticate that
// tells an MCP client to use an API token (error="invalid_token" and how to
// make one), and the OAuth discovery documents and default endpoints an MCP
// client looks for next answer 404 JSON saying fleetmux has no OAuth, never a
// document that starts a flow. (It answered a bare `Bearer realm="fleetmux"`,
// so clients went looking for OAuth metadata.)
func TestNoOAuth(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	do := func(method, path, body string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, f.Base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}`
	for _, r := range []struct{ method, path string }{{"POST", "/mcp"}, {"GET", "/mcp"}, {"GET", "/v1/nodes"}} {
		resp, _ := do(r.method, r.path, initialize)
		ch := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != http.StatusUnauthorized || ch != api.BearerChallenge ||
			!strings.Contains(ch, `error="invalid_token"`) || !strings.Contains(ch, "fleetmux token create") || strings.Contains(ch, "resource_metadata") {
			t.Errorf("%s %s without a token: %d, WWW-Authenticate %q", r.method, r.path, resp.StatusCode, ch)
		}
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/.well-known/oauth-protected-resource"},
		{"GET", "/.well-known/oauth-protected-resource/mcp"},
		{"GET", "/.well-known/oauth-authorization-server"},
		{"GET", "/.well-known/oauth-authorization-server/mcp"},
		{"GET", "/.well-known/openid-configuration"},
		{"GET", "/authorize"},
		{"POST", "/token"},
		{"POST", "/register"},
	} {
		resp, b := do(r.method, r.path, `{}`)
		var env struct {
			Error *api.Error `json:"error"`
		}
		err := json.Unmarshal(b, &env)
		if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || err != nil ||
			env.Error == nil || env.Error.Code != api.CodeNotFound || !strings.Contains(env.Error.Message, api.NoOAuth) {
			t.Errorf("%s %s: %d %q %s", r.method, r.path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		for _, w := range []string{"authorization_endpoint", "authorization_servers", "token_endpoint"} {
			if strings.Contains(string(b), w) {
				t.Errorf("%s %s answers OAuth metadata: %s", r.method, r.path, b)
			}
		}
	}
	// The go-sdk's client without a token: refused at once, no flow.
	_, err := mcp.NewClient(&mcp.Implementation{Name: "probe", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: f.Base + "/mcp", MaxRetries: -1}, nil)
	if err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Errorf("connect without a token: %v", err)
	}
}
