package node

import (
	"context"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/agent"
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

// A coding agent's work as spans (OpenTelemetry's GenAI conventions), from its
// CLI's hooks: a turn, from the prompt (UserPromptSubmit) to its end (Stop), is
// an "invoke_agent DRIVER" span; each tool call, from PreToolUse to PostToolUse,
// an "execute_tool TOOL" span under it. Each turn is a trace of its own.

// maxOpenToolSpans bounds the tool calls of one agent waiting for their end.
const maxOpenToolSpans = 64

// agentSpans are the open spans of the node's agents.
type agentSpans struct {
	mu sync.Mutex
	m  map[string]*agentSpan // by agent (session) id
}

// agentSpan is one agent's open turn and tool calls.
type agentSpan struct {
	turnCtx context.Context
	turn    trace.Span
	tools   []toolSpan // oldest first
}

type toolSpan struct {
	name string
	span trace.Span
}

// traceHook turns agent id's hook event into spans (nothing while tracing is off).
func (n *Node) traceHook(id, driver string, ev agent.HookEvent) {
	if !tracing.On() {
		return
	}
	n.aspans.mu.Lock()
	defer n.aspans.mu.Unlock()
	if n.aspans.m == nil {
		n.aspans.m = map[string]*agentSpan{}
	}
	a := n.aspans.m[id]
	if a == nil {
		a = &agentSpan{turnCtx: context.Background()}
		n.aspans.m[id] = a
	}
	tool := api.OneLine(ev.ToolName, 64)
	switch ev.Name {
	case "UserPromptSubmit":
		a.end()
		a.turnCtx, a.turn = tracing.Start(context.Background(), "invoke_agent "+driver, trace.SpanKindInternal,
			attribute.String("gen_ai.operation.name", "invoke_agent"), attribute.String("gen_ai.agent.id", id),
			attribute.String("gen_ai.agent.name", driver), attribute.String("fleetmux.node", n.cfg.Name))
	case "PreToolUse":
		if len(a.tools) >= maxOpenToolSpans {
			return
		}
		_, s := tracing.Start(a.turnCtx, "execute_tool "+tool, trace.SpanKindInternal,
			attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", tool),
			attribute.String("gen_ai.agent.id", id))
		a.tools = append(a.tools, toolSpan{tool, s})
	case "PostToolUse":
		for i, t := range a.tools {
			if t.name == tool {
				t.span.End()
				a.tools = append(a.tools[:i], a.tools[i+1:]...)
				break
			}
		}
	case "Stop", "SessionEnd":
		a.end()
	}
}

// end ends a's open tool calls and turn.
func (a *agentSpan) end() {
	for _, t := range a.tools {
		t.span.End()
	}
	a.tools = nil
	if a.turn != nil {
		a.turn.End()
		a.turn, a.turnCtx = nil, context.Background()
	}
}

// endAgentSpans ends agent id's open spans (it ended).
func (n *Node) endAgentSpans(id string) {
	n.aspans.mu.Lock()
	defer n.aspans.mu.Unlock()
	if a := n.aspans.m[id]; a != nil {
		a.end()
		delete(n.aspans.m, id)
	}
}
