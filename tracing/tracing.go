// Package tracing is fleetmux's OpenTelemetry traces: the one place that reads the
// standard OTEL_* environment variables, installs the SDK and the OTLP/HTTP
// exporter when they ask for it, and gives the rest of the tree a few calls that
// cost an atomic load and nothing else while tracing is off.
//
// Off unless configured: New installs nothing (the global tracer provider stays
// OpenTelemetry's no-op one, no exporter runs) unless OTEL_TRACES_EXPORTER=otlp,
// or OTEL_TRACES_EXPORTER is unset and OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none keep it off whatever else is set. The exporter reads
// the rest of the OTEL_EXPORTER_OTLP_* variables itself (headers, certificates,
// timeout, compression), the SDK reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*,
// and the resource reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
//
// Trace context crosses NATS as the W3C traceparent (and tracestate) header of
// the request (Inject, Extract); baggage is not propagated. A traceparent is a
// correlation id, not a credential: it is never signed, trusted or audited as
// anything but the trace it names.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of every fleetmux span.
const Scope = "github.com/fleetmux/fleetmux"

// ErrConfig is wrapped by New's errors about the OTEL_* variables.
var ErrConfig = errors.New("tracing: bad configuration")

// Config configures New.
type Config struct {
	// Service is the service.name when OTEL_SERVICE_NAME (or service.name in
	// OTEL_RESOURCE_ATTRIBUTES) does not name one: "fleetmux-controller", ….
	Service string
	// Version is the service.version.
	Version string
	// Exporter, when set, receives every span synchronously instead of OTLP, and
	// tracing is on whatever the environment says (tests: an in-memory exporter).
	Exporter sdktrace.SpanExporter
	// Logger gets the exporter's errors (a collector that cannot be reached), as
	// warnings; nil: slog's default.
	Logger *slog.Logger
}

// Tracing is the installed SDK (or nothing, when tracing is off).
type Tracing struct {
	tp   *sdktrace.TracerProvider // nil: off
	once sync.Once
	err  error
}

// on is whether a Tracing is installed: the hot paths test it before doing anything.
var on atomic.Bool

// tracer is the fleetmux tracer of the installed provider (nil while off).
var tracer atomic.Pointer[trace.Tracer]

// prop is the propagator of trace context: W3C traceparent and tracestate.
var prop = propagation.TraceContext{}

// noopSpan is what Start returns while tracing is off.
var noopSpan trace.Span = noop.Span{}

// Exporting reports which exporter the environment asks for: "otlp" or "" (off).
// It fails on an exporter or protocol this build does not have.
func Exporting() (string, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return "", nil
	}
	exp := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")))
	switch exp {
	case "none":
		return "", nil
	case "":
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return "", nil
		}
	case "otlp":
	default:
		return "", fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: only otlp and none are built in", ErrConfig, exp)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(os.Getenv(k)); p != "" {
			if p != "http/protobuf" {
				return "", fmt.Errorf("%w: %s=%q: only http/protobuf is built in", ErrConfig, k, p)
			}
			break
		}
	}
	return "otlp", nil
}

// New installs tracing as the process-wide OpenTelemetry provider when the
// environment (or cfg.Exporter) asks for it, and returns a Tracing whose Shutdown
// flushes and removes it. Off, it installs nothing and its Shutdown does nothing.
// One Tracing at a time: a second New before the first's Shutdown fails.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	var opts []sdktrace.TracerProviderOption
	if cfg.Exporter != nil {
		opts = append(opts, sdktrace.WithSyncer(cfg.Exporter))
	} else {
		kind, err := Exporting()
		if err != nil || kind == "" {
			return &Tracing{}, err
		}
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.Service)}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	if !on.CompareAndSwap(false, true) {
		_ = tp.Shutdown(ctx)
		return nil, fmt.Errorf("%w: tracing is already installed", ErrConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: spans not exported", "err", err) }))
	otel.SetTracerProvider(tp)
	t := tp.Tracer(Scope)
	tracer.Store(&t)
	return &Tracing{tp: tp}, nil
}

// Enabled reports whether t exports spans.
func (t *Tracing) Enabled() bool { return t != nil && t.tp != nil }

// Shutdown ends the spans' export: it flushes what is buffered (within ctx) and
// puts the no-op provider back. Idempotent; nil-safe.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	t.once.Do(func() {
		on.Store(false)
		tracer.Store(nil)
		otel.SetTracerProvider(noop.NewTracerProvider())
		t.err = t.tp.Shutdown(ctx)
	})
	return t.err
}

// On reports whether tracing is installed: callers skip building attributes when not.
func On() bool { return on.Load() }

// Start starts a span named name as a child of ctx's span (a root without one).
// Off, it returns ctx unchanged and a no-op span, allocating nothing; the caller
// always Ends what it got.
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, noopSpan
	}
	t := tracer.Load()
	if t == nil {
		return ctx, noopSpan
	}
	return (*t).Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// StartAt is Start with explicit start options (a block's own start time).
func StartAt(ctx context.Context, name string, kind trace.SpanKind, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, noopSpan
	}
	t := tracer.Load()
	if t == nil {
		return ctx, noopSpan
	}
	return (*t).Start(ctx, name, append(opts, trace.WithSpanKind(kind))...)
}

// Fail marks span as failed with err (nothing for a nil err).
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.SetStatus(codes.Error, err.Error())
}

// Inject adds ctx's trace context to h (traceparent, tracestate) when tracing is
// on and ctx holds a span. h must not be nil.
func Inject(ctx context.Context, h map[string]string) {
	if !on.Load() {
		return
	}
	prop.Inject(ctx, propagation.MapCarrier(h))
}

// Extract returns ctx with the remote span context h carries (traceparent), or
// ctx as it is when tracing is off or h carries none.
func Extract(ctx context.Context, h map[string]string) context.Context {
	if !on.Load() || h[HeaderTraceparent] == "" {
		return ctx
	}
	return prop.Extract(ctx, propagation.MapCarrier(h))
}

// ExtractFrom is Extract for any carrier (an HTTP request's headers:
// propagation.HeaderCarrier).
func ExtractFrom(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	if !on.Load() {
		return ctx
	}
	return prop.Extract(ctx, c)
}

// HeaderTraceparent is the W3C trace-context header (lower case, as the
// propagator writes it into a map carrier).
const HeaderTraceparent = "traceparent"

// TraceID is the hex trace id of ctx's span, "" when there is none (always while
// tracing is off, unless ctx came from a traced peer).
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// HeaderTraceID is the trace id of a W3C traceparent in h ("" when there is none or
// it is malformed), read without the SDK: a node that does not trace still names
// the trace of a request that came traced.
func HeaderTraceID(h map[string]string) string {
	tp := h[HeaderTraceparent]
	// version "-" trace-id(32) "-" parent-id(16) "-" flags(2)
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' {
		return ""
	}
	id, err := trace.TraceIDFromHex(tp[3:35])
	if err != nil || !id.IsValid() {
		return ""
	}
	return id.String()
}

// Transport is an HTTP client's transport that sends the trace context of each
// request's context (traceparent) when tracing is on; base nil is
// http.DefaultTransport. A door that reaches the API over HTTP (SSH's verbs) so
// keeps its requests in its trace.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripper{base}
}

type roundTripper struct{ base http.RoundTripper }

func (t roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	if !on.Load() || !trace.SpanContextFromContext(r.Context()).IsValid() {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context()) // a RoundTripper never changes its caller's request
	prop.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return t.base.RoundTrip(r)
}
