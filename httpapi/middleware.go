package httpapi

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/tracing"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the API's Prometheus metrics.
type metrics struct {
	requests *prometheus.CounterVec   // route, code
	latency  *prometheus.HistogramVec // route
}

// newMetrics registers the API's metrics on reg.
func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	buckets := []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetmux_http_requests_total", Help: "HTTP API requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleetmux_http_request_duration_seconds", Help: "HTTP API request latency by route (streams: until the stream ends).", Buckets: buckets,
		}, []string{"route"}),
	}
	for _, col := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// The API's two middlewares, metrics and audit, wrap the whole ServeMux (build
// makes the chain), so every route gets them, /mcp included. Each learns the
// route from r.Pattern and its path values once the handler returned: the mux sets
// them on the request it is given, so nothing between a middleware and the mux may
// replace the request (WithContext, Clone). What the reply was comes from a
// replyRecorder each of them puts around the ResponseWriter.

// middleware counts and times every request that reached a route, by the route's
// pattern and the reply's status (streams: until they end).
func (m *metrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &replyRecorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		elapsed := time.Since(start)
		m.requests.WithLabelValues(r.Pattern, strconv.Itoa(rec.code)).Inc()
		m.latency.WithLabelValues(r.Pattern).Observe(elapsed.Seconds())
	})
}

// audit audits every request that reached a route whose pattern names a
// mutating method (POST, PATCH, DELETE), the ones refused included: who, which
// route, which session, and the result (ok, the error code, or the status).
// Routes without a method in their pattern (/mcp) audit what they do themselves.
// The reply goes out first: the record (JSON, a file write, a publish, a log line)
// is not the client's wait.
func (s *Server) audit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &replyRecorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		method, _, ok := strings.Cut(r.Pattern, " ")
		if !ok || method == http.MethodGet {
			return
		}
		rec.Flush()
		result := "ok"
		if rec.code >= 400 {
			result = rec.errCode
			if result == "" {
				result = strconv.Itoa(rec.code)
			}
		}
		ar := api.AuditRecord{
			Time: time.Now().UTC(), Session: r.PathValue("id"), Actor: actor(r), Principal: callerOf(r.Context()).principal,
			Action: r.Pattern, Detail: r.URL.Path, Result: result, TraceID: tracing.TraceID(r.Context()),
		}
		if n := r.PathValue("node"); n != "" && ar.Session != "" {
			ar.Session = n + "/" + ar.Session
		}
		for _, f := range rec.notes {
			f(&ar)
		}
		s.fleet.Audit(ar)
	})
}

// replyRecorder remembers the status of a reply and, when it is an error reply
// written by writeError, its code; it passes Flush, Hijack (the attach WebSocket)
// and Unwrap (http.ResponseController) through.
type replyRecorder struct {
	http.ResponseWriter
	code    int
	errCode string
	notes   []func(*api.AuditRecord) // noteAudit's additions to the request's audit record
}

func (s *replyRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// noteError is how writeError tells the recorders the reply's error code.
func (s *replyRecorder) noteError(code string) { s.errCode = code }

// noteAudit is how a handler adds to its request's audit record (e.g. the policy
// version it stored): f runs on the record before it is written.
func noteAudit(w http.ResponseWriter, f func(*api.AuditRecord)) {
	for w != nil {
		if rr, ok := w.(*replyRecorder); ok {
			rr.notes = append(rr.notes, f)
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

func (s *replyRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *replyRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := s.ResponseWriter.(http.Hijacker); ok {
		s.code = http.StatusSwitchingProtocols
		return h.Hijack()
	}
	return nil, nil, errors.New("httpapi: response cannot be hijacked")
}

func (s *replyRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// noteError tells every replyRecorder around w the code of the error reply being
// written.
func noteError(w http.ResponseWriter, code string) {
	for w != nil {
		if n, ok := w.(interface{ noteError(string) }); ok {
			n.noteError(code)
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}
