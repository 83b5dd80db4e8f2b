package controller

import (
	"errors"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's Prometheus metrics.
type metrics struct {
	nodeRequests *prometheus.CounterVec   // verb, result
	nodeLatency  *prometheus.HistogramVec // verb
	fanout       *prometheus.CounterVec   // result
	streamBytes  prometheus.Counter
}

// newMetrics registers the metrics on reg; the node gauges are read from table at
// scrape time.
func newMetrics(reg *prometheus.Registry, table *table) (*metrics, error) {
	buckets := []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	m := &metrics{
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
	natsSignal := prometheus.NewDesc("fleetmux_liveness_nats", "1 when node liveness uses the nodes' NATS connections beside gossip; 0: gossip alone (no connection list from the NATS server yet).", nil, nil)
	for _, col := range []prometheus.Collector{m.nodeRequests, m.nodeLatency, m.fanout, m.streamBytes,
		collectorFunc{descs: []*prometheus.Desc{nodes, sessions, published, natsSignal}, collect: func(ch chan<- prometheus.Metric) {
			by, n := table.counts()
			for st, k := range by {
				ch <- prometheus.MustNewConstMetric(nodes, prometheus.GaugeValue, float64(k), st)
			}
			ch <- prometheus.MustNewConstMetric(sessions, prometheus.GaugeValue, float64(n))
			known := 0.0
			if table.presenceKnown() {
				known = 1
			}
			ch <- prometheus.MustNewConstMetric(natsSignal, prometheus.GaugeValue, known)
			for name, b := range table.published() {
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
