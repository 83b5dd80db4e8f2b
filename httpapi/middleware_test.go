package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestMiddlewares: every routed request is counted and timed by route and status,
// /mcp included; every mutating one is audited with its result (ok, the error
// code of the reply, or the status), refused ones included; reads and /mcp (which
// audits its tool calls itself) are not; requests the guard refuses reach neither.
func TestMiddlewares(t *testing.T) {
	f, bus := newFakeFixture(t, map[string]int{"n1": 0}, nil)
	bus.handle("n1", "run", reply(api.BlockResult{Block: api.Block{N: 1, State: api.BlockDone}}))
	bus.handle("n1", "get", reply(api.Session{Node: "n1", ID: "s1"}))
	bus.handle("n1", "input", fail(api.Errorf(api.CodeBusy, "someone else types")))
	bus.handle("n1", "create", reply(api.Session{Node: "n1", ID: "s2"}))
	run := "/v1/sessions/n1/s1/run"

	// What must not be audited first: a record made by mistake would be published
	// before those of the requests that follow.
	f.Must(200, "GET", "/v1/sessions/n1/s1", nil, nil)
	f.APIErr(403, api.CodeForbidden, "POST", run, api.RunBody{Command: "true"}, "Origin", "http://evil.example") // the guard's
	init := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	mcpCode, _ := f.Do("POST", "/mcp", init, "Accept", "application/json, text/event-stream")
	f.Do("POST", run, api.RunBody{Command: "true"}, api.HeaderActor, "agent-7")
	f.APIErr(400, api.CodeBadRequest, "POST", run, []byte(`{`))
	f.APIErr(409, api.CodeBusy, "POST", "/v1/sessions/n1/s1/input", api.InputBody{Data: "x"})
	f.Must(201, "POST", "/v1/sessions", api.NewSession{}, nil)

	type key struct{ action, session, result string }
	want := map[key]bool{
		{"POST /v1/sessions/{node}/{id}/run", "n1/s1", "ok"}:          true,
		{"POST /v1/sessions/{node}/{id}/run", "n1/s1", "bad_request"}: true,
		{"POST /v1/sessions/{node}/{id}/input", "n1/s1", "busy"}:      true,
		{"POST /v1/sessions", "", "ok"}:                               true,
	}
	var recs []api.AuditRecord
	testutil.Eventually(t, 5*time.Second, func() bool {
		recs = recs[:0]
		for _, m := range bus.published(api.Subjects{}.Audit("ctl")) {
			var r api.AuditRecord
			if err := json.Unmarshal(m.data, &r); err != nil {
				t.Fatalf("audit record %s: %v", m.data, err)
			}
			recs = append(recs, r)
		}
		return len(recs) >= len(want)
	}, "%d audit records", len(want))
	if len(recs) != len(want) {
		t.Fatalf("audit records: %+v, want %d", recs, len(want))
	}
	for _, r := range recs {
		if !want[key{r.Action, r.Session, r.Result}] {
			t.Errorf("unexpected audit record %+v", r)
		}
		if r.Node != "ctl" || r.Time.IsZero() || !strings.HasSuffix(r.Actor, "@127.0.0.1") || !strings.HasPrefix(r.Detail, "/v1/") {
			t.Errorf("audit record fields: %+v", r)
		}
		if r.Result == "ok" && strings.HasSuffix(r.Action, "/run") && r.Actor != "agent-7@127.0.0.1" {
			t.Errorf("run's actor %q", r.Actor)
		}
	}

	_, b := f.Do("GET", "/metrics", nil)
	m := string(b)
	for _, line := range []string{
		`fleetmux_http_requests_total{code="200",route="POST /v1/sessions/{node}/{id}/run"} 1`,
		`fleetmux_http_requests_total{code="400",route="POST /v1/sessions/{node}/{id}/run"} 1`,
		`fleetmux_http_requests_total{code="409",route="POST /v1/sessions/{node}/{id}/input"} 1`,
		`fleetmux_http_requests_total{code="201",route="POST /v1/sessions"} 1`,
		`fleetmux_http_requests_total{code="200",route="GET /v1/sessions/{node}/{id}"} 1`,
		fmt.Sprintf(`fleetmux_http_requests_total{code="%d",route="/mcp"} 1`, mcpCode),
		`fleetmux_http_request_duration_seconds_count{route="POST /v1/sessions/{node}/{id}/run"} 2`,
		`fleetmux_http_request_duration_seconds_count{route="/mcp"} 1`,
		`fleetmux_node_requests_total{result="busy",verb="input"} 1`,
	} {
		if !strings.Contains(m, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}
	if strings.Contains(m, `code="403"`) {
		t.Error("a request the guard refused was counted")
	}
	if t.Failed() {
		t.Log(m)
	}
	if mcpCode != http.StatusOK {
		t.Errorf("MCP initialize: %d", mcpCode)
	}
}
