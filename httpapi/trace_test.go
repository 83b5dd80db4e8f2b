package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// startTracing installs tracing with an in-memory exporter for the test (before the
// stack is built: the API wraps itself in its span only when tracing is on).
func startTracing(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), tracing.Config{Service: "fleetmux-test", Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return exp
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// TestTraceRunHTTPToBlock: one run through the HTTP API (real embedded NATS, a
// real node agent, a real bash session) is one connected trace: the HTTP server
// span, the controller's client span of the node request, the node's server span
// across the NATS hop (traceparent in the request's headers), and the block's
// span under it with the session, the block number, process.exit.code (status
// error: it is not 0), the command redacted, and the policy's decision as an
// event; the node's and the controller's audit records name the trace.
func TestTraceRunHTTPToBlock(t *testing.T) {
	exp := startTracing(t)
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Policy: true, Store: true})
	f.setPolicyEverywhere(t, `version: 1
rules:
  - name: default
    action: allow
redact:
  - {name: key, pattern: 'SECRET[0-9]{6}'}
`)
	s := f.NewSession("n1")
	_, audit := testutil.AuditSub(t, f.NATS.ClientURL(), "n1")
	_, ctlAudit := testutil.AuditSub(t, f.NATS.ClientURL(), "ctl")
	exp.Reset()
	br := f.Run("n1", s.ID, "echo SECRET123456 >/dev/null; (exit 3)")
	if br.Block.ExitCode == nil || *br.Block.ExitCode != 3 {
		t.Fatalf("run: %+v", br.Block)
	}
	rec := testutil.NextAudit(t, audit, api.VerbRun)
	ctlRec := testutil.NextAudit(t, ctlAudit, "POST /v1/sessions/{node}/{id}/run")

	var httpSpan, client, server, block sdktrace.ReadOnlySpan
	testutil.Eventually(t, 10e9, func() bool { // the HTTP span ends once the reply is written
		httpSpan, client, server, block = nil, nil, nil, nil
		for _, sp := range exp.GetSpans().Snapshots() {
			switch {
			case sp.Name() == "POST /v1/sessions/{node}/{id}/run":
				httpSpan = sp
			case sp.Name() == "fleetmux.node run" && sp.SpanKind() == trace.SpanKindClient:
				client = sp
			case sp.Name() == "fleetmux.node run" && sp.SpanKind() == trace.SpanKindServer:
				server = sp
			case sp.Name() == "fleetmux.block":
				block = sp
			}
		}
		return httpSpan != nil && client != nil && server != nil && block != nil
	}, "the run's four spans")

	tid := httpSpan.SpanContext().TraceID()
	for _, sp := range []sdktrace.ReadOnlySpan{client, server, block} {
		if sp.SpanContext().TraceID() != tid {
			t.Fatalf("%s is in trace %s, the HTTP span in %s", sp.Name(), sp.SpanContext().TraceID(), tid)
		}
	}
	if httpSpan.Parent().IsValid() {
		t.Errorf("the HTTP span has a parent: %v", httpSpan.Parent())
	}
	for _, link := range [][2]sdktrace.ReadOnlySpan{{httpSpan, client}, {client, server}, {server, block}} {
		if link[1].Parent().SpanID() != link[0].SpanContext().SpanID() {
			t.Errorf("%s (%v) is not the child of %s", link[1].Name(), link[1].SpanKind(), link[0].Name())
		}
	}
	if !server.Parent().IsRemote() {
		t.Error("the node's span does not continue a remote parent: the context did not cross NATS")
	}

	if v, ok := attr(block, "process.exit.code"); !ok || v.AsInt64() != 3 {
		t.Errorf("block process.exit.code = %v", v.String())
	}
	if block.Status().Code != codes.Error {
		t.Errorf("block status %v, want error for exit 3", block.Status())
	}
	if v, _ := attr(block, "fleetmux.session"); v.AsString() != s.ID {
		t.Errorf("block session %q, want %s", v.String(), s.ID)
	}
	if v, _ := attr(block, "fleetmux.block"); v.AsInt64() != int64(br.Block.N) {
		t.Errorf("block number %v, want %d", v.String(), br.Block.N)
	}
	cmd, _ := attr(block, "process.command_line")
	if strings.Contains(cmd.AsString(), "SECRET1") || !strings.Contains(cmd.AsString(), "[REDACTED:key]") {
		t.Errorf("block command %q: not redacted", cmd.AsString())
	}
	if !block.StartTime().Equal(br.Block.StartedAt) || br.Block.FinishedAt == nil || !block.EndTime().Equal(*br.Block.FinishedAt) {
		t.Errorf("block span %v..%v, block %v..%v", block.StartTime(), block.EndTime(), br.Block.StartedAt, br.Block.FinishedAt)
	}
	var decided bool
	for _, ev := range server.Events() {
		if ev.Name == "fleetmux.policy.decision" {
			for _, kv := range ev.Attributes {
				if kv.Key == "fleetmux.policy.action" && kv.Value.AsString() == api.ActionAllow {
					decided = true
				}
			}
		}
	}
	if !decided {
		t.Errorf("no allow decision event on the node's span: %+v", server.Events())
	}
	if v, _ := attr(httpSpan, "http.response.status_code"); v.AsInt64() != 200 {
		t.Errorf("HTTP span status code %v", v.String())
	}
	for _, sp := range []sdktrace.ReadOnlySpan{httpSpan, client, server} {
		if sp.Status().Code == codes.Error {
			t.Errorf("%s: status error for a request that succeeded", sp.Name())
		}
	}

	if rec.TraceID != tid.String() || ctlRec.TraceID != tid.String() {
		t.Errorf("audit trace_id: node %q, controller %q, want %s", rec.TraceID, ctlRec.TraceID, tid)
	}
}
