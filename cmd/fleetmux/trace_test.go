package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a collector's OTLP/HTTP traces endpoint in the test: it decodes
// every export request and keeps each span's name → its trace id.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string][]string // span name → trace ids
	bad   []string
}

func startOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	r := &otlpReceiver{spans: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var ex coltrace.ExportTraceServiceRequest
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &ex) != nil {
			r.bad = append(r.bad, req.Method+" "+req.URL.Path)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		for _, rs := range ex.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans[s.Name] = append(r.spans[s.Name], trace.TraceID(s.TraceId).String())
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

// TestDevExportsTraces: `fleetmux dev` with OTEL_EXPORTER_OTLP_ENDPOINT pointed at a
// receiver in the test exports the spans of a run there, the HTTP span and the
// block's in one trace, flushed when dev stops; the controller's audit record of
// the run names that trace.
func TestDevExportsTraces(t *testing.T) {
	recv, url := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	addr, stop := startDevStop(t)
	if _, errs, err := runArgs(t, "new", "--addr", addr); err != nil {
		t.Fatalf("new: %v %s", err, errs)
	}
	if _, errs, err := runArgs(t, "run", "--addr", addr, "here/s1", "--", "(exit 4)"); exitCode(err) != 4 {
		t.Fatalf("run: %v %s", err, errs)
	}
	stderr := stop() // flushes the spans
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.bad) > 0 {
		t.Fatalf("bad export requests: %v", recv.bad)
	}
	httpIDs, blockIDs := recv.spans["POST /v1/sessions/{node}/{id}/run"], recv.spans["fleetmux.block"]
	if len(httpIDs) != 1 || len(blockIDs) != 1 || httpIDs[0] != blockIDs[0] {
		t.Fatalf("run's HTTP spans in traces %v, block spans in %v: want one each, in one trace; all: %v\n%s", httpIDs, blockIDs, recv.spans, stderr)
	}
	f, err := os.Open(filepath.Join("data", "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var rec api.AuditRecord
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Action == "POST /v1/sessions/{node}/{id}/run" {
			found = rec.TraceID == httpIDs[0]
			if !found {
				t.Errorf("the run's audit record names trace %q, want %s", rec.TraceID, httpIDs[0])
			}
		}
	}
	if !found {
		t.Error("no audit record of the run with its trace id")
	}
}
