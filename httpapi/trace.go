package httpapi

import (
	"net/http"
	"strings"

	"github.com/fleetmux/fleetmux/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// traced wraps the API's handler in a server span per request (HTTP semantic
// conventions: "METHOD ROUTE", the route pattern, the status), continuing the
// caller's W3C traceparent when it sends one; the controller's spans and the
// nodes' hang under it. It is the outermost handler: the context it makes is the
// one every later handler and the controller get. While tracing is off when the
// API is built, it returns next itself: nothing is added to the request path.
func traced(mux *http.ServeMux, next http.Handler) http.Handler {
	if !tracing.On() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tracing.On() {
			next.ServeHTTP(w, r)
			return
		}
		_, pattern := mux.Handler(r)
		route := pattern
		if _, p, ok := strings.Cut(pattern, " "); ok {
			route = p
		}
		name := r.Method
		if route != "" {
			name += " " + route
		}
		ctx := tracing.ExtractFrom(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracing.Start(ctx, name, trace.SpanKindServer,
			attribute.String("http.request.method", r.Method), attribute.String("http.route", route),
			attribute.String("url.path", r.URL.Path), attribute.String("url.scheme", scheme(r)))
		defer span.End()
		rec := &replyRecorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", rec.code))
		if rec.code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(rec.code))
		}
		if rec.errCode != "" {
			span.SetAttributes(attribute.String("error.type", rec.errCode))
		}
	})
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}
