package tracing

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otelVars are the variables New reads; each test starts with all of them unset.
var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
}

func clearEnv(t *testing.T) {
	for _, k := range otelVars {
		t.Setenv(k, "")
	}
}

// TestOffUnlessConfigured: with no OTEL_* variable (or with them saying none or
// disabled) New installs nothing: the global provider is not the SDK's, no span
// records, nothing is injected, and Start allocates nothing.
func TestOffUnlessConfigured(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"},
		{"OTEL_SERVICE_NAME": "x"}, // a name alone exports nothing
	} {
		clearEnv(t)
		for k, v := range env {
			t.Setenv(k, v)
		}
		tr, err := New(context.Background(), Config{Service: "test"})
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		if tr.Enabled() || On() {
			t.Fatalf("%v: tracing on", env)
		}
		if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); sdk {
			t.Fatalf("%v: the SDK's provider is installed", env)
		}
		ctx := context.Background()
		ctx2, span := Start(ctx, "x", trace.SpanKindServer)
		if ctx2 != ctx || span.IsRecording() {
			t.Fatalf("%v: Start made a span while off", env)
		}
		h := map[string]string{}
		Inject(ctx2, h)
		if len(h) != 0 {
			t.Fatalf("%v: Inject wrote %v while off", env, h)
		}
		if a := testing.AllocsPerRun(100, func() {
			c, s := Start(ctx, "x", trace.SpanKindServer)
			s.End()
			Inject(c, h)
			_ = Extract(c, h)
		}); a != 0 {
			t.Fatalf("%v: %v allocations per span while off", env, a)
		}
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRefusesWhatIsNotBuiltIn: an exporter or protocol this build lacks is an
// error, not silently nothing.
func TestRefusesWhatIsNotBuiltIn(t *testing.T) {
	for _, env := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
	} {
		clearEnv(t)
		for k, v := range env {
			t.Setenv(k, v)
		}
		if _, err := New(context.Background(), Config{Service: "test"}); !errors.Is(err, ErrConfig) {
			t.Fatalf("%v: err %v, want ErrConfig", env, err)
		}
		if On() {
			t.Fatalf("%v: tracing on after an error", env)
		}
	}
}

// TestOTLPExport: OTEL_EXPORTER_OTLP_ENDPOINT pointed at a receiver in the test:
// the spans arrive there as OTLP/HTTP protobuf on /v1/traces, named by
// OTEL_SERVICE_NAME, once Shutdown flushed them.
func TestOTLPExport(t *testing.T) {
	var mu sync.Mutex
	var got []*coltrace.ExportTraceServiceRequest
	var bad []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			bad = append(bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			bad = append(bad, "undecodable: "+err.Error())
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		got = append(got, &req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "fleetmux-under-test")
	tr, err := New(context.Background(), Config{Service: "fleetmux-controller"})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	if !tr.Enabled() || !On() {
		t.Fatal("tracing off with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	ctx, parent := Start(context.Background(), "parent", trace.SpanKindServer)
	h := map[string]string{}
	Inject(ctx, h)
	if HeaderTraceID(h) != parent.SpanContext().TraceID().String() {
		t.Fatalf("injected %v, span %v", h, parent.SpanContext().TraceID())
	}
	_, child := Start(Extract(context.Background(), h), "child", trace.SpanKindServer)
	child.End()
	parent.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if On() {
		t.Fatal("tracing still on after Shutdown")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("bad export requests: %v", bad)
	}
	names := map[string]string{}
	var service string
	for _, req := range got {
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.Resource.Attributes {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names[s.Name] = trace.TraceID(s.TraceId).String()
				}
			}
		}
	}
	want := parent.SpanContext().TraceID().String()
	if names["parent"] != want || names["child"] != want {
		t.Fatalf("spans received %v, want parent and child in trace %s", names, want)
	}
	if service != "fleetmux-under-test" {
		t.Fatalf("service.name %q, want OTEL_SERVICE_NAME's", service)
	}
}

// TestInMemory: Config.Exporter turns tracing on whatever the environment says,
// and a second New while one is installed fails.
func TestInMemory(t *testing.T) {
	clearEnv(t)
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), Config{Service: "s", Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	if _, err := New(context.Background(), Config{Service: "s", Exporter: exp}); !errors.Is(err, ErrConfig) {
		t.Fatalf("second New: %v", err)
	}
	_, s := Start(context.Background(), "one", trace.SpanKindInternal)
	s.End()
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].Name != "one" || spans[0].Resource.String() == "" {
		t.Fatalf("spans %v", spans)
	}
}

func TestHeaderTraceID(t *testing.T) {
	for tp, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
		"00-4bf92f3577b34da6a3ce929d0e0e473x-00f067aa0ba902b7-01": "",
		"garbage": "",
		"":        "",
	} {
		if got := HeaderTraceID(map[string]string{HeaderTraceparent: tp}); got != want {
			t.Errorf("HeaderTraceID(%q) = %q, want %q", tp, got, want)
		}
	}
}
