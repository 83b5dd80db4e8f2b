package controller

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's Prometheus metrics.
type metrics struct {
	requests     *prometheus.CounterVec   // route, code
	latency      *prometheus.HistogramVec // route
	nodeRequests *prometheus.CounterVec   // verb, result
	nodeLatency  *prometheus.HistogramVec // verb
	fanout       *prometheus.CounterVec   // result
	streamBytes  prometheus.Counter
	c            *Controller
}

func newMetrics(reg *prometheus.Registry, c *Controller) (*metrics, error) {
	buckets := []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	m := &metrics{
		c: c,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetmux_http_requests_total", Help: "HTTP API requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleetmux_http_request_duration_seconds", Help: "HTTP API request latency by route (streams: until the stream ends).", Buckets: buckets,
		}, []string{"route"}),
		nodeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetmux_node_requests_total", Help: "Requests to node agents by verb and result (ok or the error code).",
		}, []string{"verb", "result"}),
		nodeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleetmux_node_request_duration_seconds", Help: "Node agent request latency by verb.", Buckets: buckets,
		}, []string{"verb"}),
		fanout: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetmux_fanout_targets_total", Help: "Fan-out targets by result (ok, failed, skipped).",
		}, []string{"result"}),
		streamBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetmux_stream_bytes_total", Help: "Output bytes sent to attach and follow clients.",
		}),
	}
	nodes := prometheus.NewDesc("fleetmux_nodes", "Nodes in the node table by status.", []string{"status"}, nil)
	sessions := prometheus.NewDesc("fleetmux_sessions", "Sessions on usable nodes (as they gossip it).", nil, nil)
	published := prometheus.NewDesc("fleetmux_node_published_bytes", "Output bytes a node has published since it started (as it gossips it).", []string{"node"}, nil)
	for _, col := range []prometheus.Collector{m.requests, m.latency, m.nodeRequests, m.nodeLatency, m.fanout, m.streamBytes,
		collectorFunc{descs: []*prometheus.Desc{nodes, sessions, published}, collect: func(ch chan<- prometheus.Metric) {
			by, n := c.nodes.counts()
			for st, k := range by {
				ch <- prometheus.MustNewConstMetric(nodes, prometheus.GaugeValue, float64(k), st)
			}
			ch <- prometheus.MustNewConstMetric(sessions, prometheus.GaugeValue, float64(n))
			for name, b := range c.nodes.published() {
				ch <- prometheus.MustNewConstMetric(published, prometheus.CounterValue, float64(b), name)
			}
		}},
	} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// collectorFunc is a Collector of metrics computed at scrape time.
type collectorFunc struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (f collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range f.descs {
		ch <- d
	}
}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f.collect(ch) }

func (m *metrics) nodeRequest(verb string, err error, d time.Duration) {
	result := "ok"
	var ae *api.Error
	switch {
	case err == nil:
	case errors.As(err, &ae):
		result = ae.Code
	default:
		result = "cancelled"
	}
	m.nodeRequests.WithLabelValues(verb, result).Inc()
	m.nodeLatency.WithLabelValues(verb).Observe(d.Seconds())
}

// instrument counts and times a route, and audits mutating requests.
func (m *metrics) instrument(route string, h http.Handler) http.Handler {
	mutating := route[0] != 'G' // POST, PATCH, DELETE
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		elapsed := time.Since(start)
		if mutating {
			// The reply goes out first: the metrics and the audit record (JSON, a
			// publish, a log line) are not the client's wait.
			rec.Flush()
		}
		m.requests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
		m.latency.WithLabelValues(route).Observe(elapsed.Seconds())
		if mutating {
			m.c.audit(r, route, rec)
		}
	})
}

// statusRecorder remembers the status code and the error code of a reply.
type statusRecorder struct {
	http.ResponseWriter
	code    int
	errCode string
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.code >= 400 && s.errCode == "" {
		var env api.ErrorReply
		if json.Unmarshal(p, &env) == nil && env.Error != nil {
			s.errCode = env.Error.Code
		}
	}
	return s.ResponseWriter.Write(p)
}

// Flush lets streams flush through the recorder.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack lets the attach WebSocket take the connection over.
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := s.ResponseWriter.(http.Hijacker); ok {
		s.code = http.StatusSwitchingProtocols
		return h.Hijack()
	}
	return nil, nil, errors.New("controller: response cannot be hijacked")
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// audit records one mutating request: the nodes audit what they do; the controller
// audits every mutating API request, including those it refused and fan-outs.
func (c *Controller) audit(r *http.Request, route string, rec *statusRecorder) {
	result := "ok"
	if rec.code >= 400 {
		result = rec.errCode
		if result == "" {
			result = strconv.Itoa(rec.code)
		}
	}
	rec2 := api.AuditRecord{
		Time: time.Now().UTC(), Node: c.cfg.Name, Session: r.PathValue("id"), Actor: actor(r),
		Action: route, Detail: r.URL.Path, Result: result,
	}
	if n := r.PathValue("node"); n != "" && rec2.Session != "" {
		rec2.Session = n + "/" + rec2.Session
	}
	c.audits.record(rec2)
}
