package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
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

// TestSSHVerbTraced: a verb run over the SSH front door is an "ssh VERB" span
// whose API requests continue its trace: the run's HTTP span and its block's
// span are in the SSH span's trace.
func TestSSHVerbTraced(t *testing.T) {
	sshBin := testutil.NeedTool(t, "ssh")
	keygen := testutil.NeedTool(t, "ssh-keygen")
	recv, url := startOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	dir := t.TempDir()
	key := filepath.Join(dir, "op")
	testutil.RunProgram(t, keygen, "-q", "-t", "ed25519", "-N", "", "-C", "op", "-f", key)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	akFile := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(akFile, append([]byte("role=operator "), pub...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stop := startDevStop(t, "--ssh-listen", "127.0.0.1:0", "--authorized-keys", akFile)
	m := regexp.MustCompile(`ssh -p (\d+) 127\.0\.0\.1`).FindStringSubmatch(devOut)
	if m == nil {
		t.Fatalf("dev did not print its SSH address:\n%s", devOut)
	}
	ssh := func(args ...string) int {
		t.Helper()
		cmd := exec.Command(sshBin, append([]string{"-p", m[1], "-i", key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
			"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-F", "/dev/null", "127.0.0.1"}, args...)...)
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if code := ssh("new"); code != 0 {
		t.Fatalf("ssh new: exit %d", code)
	}
	if code := ssh("run", "here/s1", "--", "'(exit 5)'"); code != 5 {
		t.Fatalf("ssh run: exit %d, want 5", code)
	}
	stderr := stop()
	recv.mu.Lock()
	defer recv.mu.Unlock()
	sshIDs, httpIDs, blockIDs := recv.spans["ssh run"], recv.spans["POST /v1/sessions/{node}/{id}/run"], recv.spans["fleetmux.block"]
	if len(sshIDs) != 1 || len(httpIDs) != 1 || len(blockIDs) != 1 || httpIDs[0] != sshIDs[0] || blockIDs[0] != sshIDs[0] {
		t.Fatalf("ssh run in traces %v, its HTTP request in %v, its block in %v: want one trace; all: %v\n%s", sshIDs, httpIDs, blockIDs, recv.spans, stderr)
	}
}
