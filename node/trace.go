package node

import (
	"context"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/session"
	"github.com/fleetmux/fleetmux/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Traces (docs/observability.md): every request the node serves is a server span
// continuing the trace its traceparent header names (the controller's client
// span); a command run in a session is a span of its own under it, from the
// block's start to its end, with the session, the block number, the command as
// the redactor leaves it, and process.exit.code (status error when it is not 0);
// an exec likewise. While tracing is off none of this runs: each entry point
// tests tracing.On first.

// traceRequest starts the server span of one request (ctx unchanged and a no-op
// span while tracing is off).
func (n *Node) traceRequest(ctx context.Context, verb string, header map[string]string) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx = tracing.Extract(ctx, header)
	return tracing.Start(ctx, "fleetmux.node "+verb, trace.SpanKindServer,
		attribute.String("fleetmux.node", n.cfg.Name), attribute.String("rpc.method", verb))
}

// endRequest records what the request came to on its span: who made it, the
// guard's decision (an event) and its error; then ends it.
func endRequest(span trace.Span, req request, aerr *api.Error) {
	if !span.IsRecording() {
		return
	}
	if req.principal != "" {
		span.SetAttributes(attribute.String("fleetmux.principal", req.principal))
	}
	var rec api.AuditRecord
	req.decision.Fill(&rec)
	if rec.Decision != "" {
		span.AddEvent("fleetmux.policy.decision", trace.WithAttributes(
			attribute.String("fleetmux.policy.action", rec.Decision),
			attribute.String("fleetmux.policy.rule", rec.Rule),
			attribute.Int64("fleetmux.policy.version", int64(rec.PolicyVersion))))
	}
	if aerr != nil {
		span.SetAttributes(attribute.String("error.type", aerr.Code))
		span.SetStatus(codes.Error, aerr.Message)
	}
	span.End()
}

// traceID is the trace an audit record names: the request's own span's, or (this
// node not tracing) the one its traceparent header carries.
func traceID(ctx context.Context, header map[string]string) string {
	if id := tracing.TraceID(ctx); id != "" {
		return id
	}
	return tracing.HeaderTraceID(header)
}

// traceBlock records block b of session e as a span under ctx's (the run request),
// timed as the block ran: until now when it still runs.
func (n *Node) traceBlock(ctx context.Context, e *entry, b session.Block) {
	if !tracing.On() || b.N == 0 {
		return
	}
	start := b.StartedAt
	if start.IsZero() {
		start = time.Now()
	}
	attrs := []attribute.KeyValue{
		attribute.String("fleetmux.node", n.cfg.Name),
		attribute.String("fleetmux.session", e.id),
		attribute.Int("fleetmux.block", b.N),
		attribute.String("process.command_line", truncate(n.redactText(b.Command), 1024)),
		attribute.String("fleetmux.block.state", string(b.State)),
	}
	if b.Note != "" {
		attrs = append(attrs, attribute.String("fleetmux.block.exit_code_note", b.Note))
	}
	_, span := tracing.StartAt(ctx, "fleetmux.block", trace.SpanKindInternal, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	exitStatus(span, b.ExitCode)
	end := b.FinishedAt
	if end.IsZero() {
		end = time.Now()
	}
	span.End(trace.WithTimestamp(end))
}

// traceExec records a finished (or still running) exec as a span under ctx's.
func (n *Node) traceExec(ctx context.Context, x api.ExecResult) {
	if !tracing.On() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("fleetmux.node", n.cfg.Name),
		attribute.String("fleetmux.exec", x.ExecID),
		attribute.String("process.command_line", truncate(n.redactText(guard.ArgvCommand(x.Argv)), 1024)),
		attribute.Bool("fleetmux.exec.timed_out", x.TimedOut),
		attribute.Bool("fleetmux.exec.background", x.Background),
	}
	if x.Signal != "" {
		attrs = append(attrs, attribute.String("fleetmux.exec.signal", x.Signal))
	}
	_, span := tracing.StartAt(ctx, "fleetmux.exec", trace.SpanKindInternal, trace.WithTimestamp(x.StartedAt), trace.WithAttributes(attrs...))
	exitStatus(span, x.ExitCode)
	span.End(trace.WithTimestamp(x.StartedAt.Add(time.Duration(x.DurationMS) * time.Millisecond)))
}

// exitStatus sets process.exit.code (when known) and the span's status: an error
// when the code is not 0 (OpenTelemetry's CLI conventions).
func exitStatus(span trace.Span, code *int) {
	if code == nil {
		return
	}
	span.SetAttributes(attribute.Int("process.exit.code", *code))
	if *code != 0 {
		span.SetStatus(codes.Error, "exit code "+itoa(*code))
	}
}
