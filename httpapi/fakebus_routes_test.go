package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/trust"
	"github.com/prometheus/client_golang/prometheus"
)

// newFakeFixture starts a controller on a fakeBus, with the nodes given (name →
// sessions they gossip) alive in its table. The fixture's HTTP helpers work on it.
func newFakeFixture(t *testing.T, nodes map[string]int, config func(*controller.Config)) (*fixture, *fakeBus) {
	t.Helper()
	bus := newFakeBus()
	tr := testutil.NewTrust(t)
	cfg := controller.Config{Name: "ctl", Bus: bus, Signer: tr.Signer, Token: stack.Token, Logger: stack.Quiet(), Registry: prometheus.NewRegistry(),
		DownGrace: 50 * time.Millisecond} // a dead notice is believed after 50ms, not a second
	if config != nil {
		config(&cfg)
	}
	ctl, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := stack.StartAPI(t, ctl, cfg.Registry, func() {
		if err := ctl.Close(); err != nil {
			t.Errorf("controller close: %v", err)
		}
		bus.inflight.Wait() // every responder returned: nothing outlives the test
	})
	for name, n := range nodes {
		ctl.Observe(controller.Member{Name: name, Addr: "127.0.0.1:1", State: api.NodeAlive, Meta: api.NodeMeta{Name: name, Sessions: n}})
	}
	return &fixture{&stack.Stack{T: t, Ctl: ctl, API: h, Base: "http://" + h.Addr(), Token: cfg.Token, HTTP: &http.Client{Timeout: 10 * time.Second}, Trust: tr}}, bus
}

func nodeStatus(f *fixture, name string) string {
	nodes, _ := f.Ctl.Nodes(context.Background())
	for _, n := range nodes.Nodes {
		if n.Name == name {
			return n.Status
		}
	}
	return ""
}

// TestFakeRouting: each route reaches the named node's verb with the request the
// node API defines, and the node's reply comes back as it was.
func TestFakeRouting(t *testing.T) {
	f, bus := newFakeFixture(t, map[string]int{"n1": 3, "n2": 1}, nil)
	s1 := api.Session{Node: "n1", ID: "s4", State: api.StateIdle, Title: "from n1"}
	bus.handle("n1", "get", reply(s1))
	bus.handle("n2", "get", reply(api.Session{Node: "n2", ID: "s4"}))
	var got api.Session
	code, body := f.Do("GET", "/v1/sessions/n1/s4", nil, api.HeaderActor, "agent-7")
	if code != 200 || json.Unmarshal(body, &got) != nil || got.Title != "from n1" {
		t.Fatalf("get: %d %s", code, body)
	}
	reqs := bus.sent(api.Subjects{}.RPC("n1", "get"))
	if len(reqs) != 1 {
		t.Fatalf("requests to n1 get: %d", len(reqs))
	}
	var sr api.SessionRequest
	if err := json.Unmarshal(reqs[0].data, &sr); err != nil || sr.Session != "s4" {
		t.Fatalf("the node got %s (%v)", reqs[0].data, err)
	}
	// The request is signed for the API's principal (its token), the actor it
	// named (a label, with its address) apart, and the API token's role.
	p, err := f.Trust.NewVerifier(t).Verify(api.Subjects{}.RPC("n1", "get"), reqs[0].data, reqs[0].header[api.HeaderAuth])
	if err != nil || !strings.HasPrefix(p.Actor, "agent-7@") || p.Principal != "token:"+trust.BootstrapName || p.Role != api.RoleAdmin || p.Controller != "ctl" {
		t.Fatalf("signed principal %+v (%v)", p, err)
	}
	if n := len(bus.sent(api.Subjects{}.RPC("n2", "get"))); n != 0 {
		t.Fatalf("n2 got %d requests for n1's session", n)
	}

	// A create without a node goes to the alive node with the fewest sessions.
	bus.handle("n2", "create", func(_ context.Context, _ map[string]string, data []byte) ([]byte, error) {
		var cr api.CreateRequest
		if err := json.Unmarshal(data, &cr); err != nil || cr.Title != "t" {
			t.Errorf("create request %s (%v)", data, err)
		}
		return json.Marshal(api.Session{Node: "n2", ID: "s9", Title: cr.Title})
	})
	f.Must(201, "POST", "/v1/sessions", api.NewSession{CreateRequest: api.CreateRequest{Title: "t"}}, &got)
	if got.Node != "n2" || got.ID != "s9" {
		t.Fatalf("create went to %s/%s", got.Node, got.ID)
	}

	// A node's error reply is the client's error, with its code and status.
	bus.handle("n1", "run", fail(api.Errorf(api.CodeBusy, "a command is running")))
	if e := f.APIErr(409, api.CodeBusy, "POST", "/v1/sessions/n1/s4/run", api.RunBody{Command: "true"}); e.Message != "a command is running" {
		t.Fatalf("busy message %q", e.Message)
	}
}

// TestFakeListPartial: a fleet-wide list names the nodes that did not answer and
// lists the others' sessions, sorted.
func TestFakeListPartial(t *testing.T) {
	f, bus := newFakeFixture(t, map[string]int{"n1": 2, "n2": 0, "n3": 0}, nil)
	bus.handle("n1", "list", reply(api.SessionList{Sessions: []api.Session{{Node: "n1", ID: "s10"}, {Node: "n1", ID: "s2"}}}))
	bus.handle("n2", "list", reply(api.SessionList{Sessions: []api.Session{{Node: "n2", ID: "s1"}}}))
	// n3: no responders.
	var l api.SessionList
	f.Must(200, "GET", "/v1/sessions", nil, &l)
	var ids []string
	for _, s := range l.Sessions {
		ids = append(ids, s.Node+"/"+s.ID)
	}
	if strings.Join(ids, " ") != "n1/s2 n1/s10 n2/s1" || len(l.Unavailable) != 1 || l.Unavailable[0] != "n3" {
		t.Fatalf("list: %v, unavailable %v", ids, l.Unavailable)
	}
	if st := nodeStatus(f, "n3"); st != api.NodeSuspect {
		t.Fatalf("n3 after no responders: %s, want suspect", st)
	}
	// Asking one node strictly gives its error.
	f.APIErr(503, api.CodeUnavailable, "GET", "/v1/sessions?node=n3", nil)
}

// TestFakeFailurePaths: what the client sees when the bus or the node fails, and
// that every failure is quick and cancels the request on the bus.
func TestFakeFailurePaths(t *testing.T) {
	f, bus := newFakeFixture(t, map[string]int{"n1": 0}, func(c *controller.Config) { c.RequestTimeout = 100 * time.Millisecond })
	quick := func(d time.Duration, what string) {
		t.Helper()
		if d > 2*time.Second {
			t.Fatalf("%s took %v", what, d)
		}
	}

	t.Run("no responders", func(t *testing.T) {
		start := time.Now()
		e := f.APIErr(503, api.CodeUnavailable, "GET", "/v1/sessions/n1/s1/screen", nil)
		quick(time.Since(start), "no responders")
		if !strings.Contains(e.Message, "does not answer") {
			t.Fatalf("message %q", e.Message)
		}
		if st := nodeStatus(f, "n1"); st != api.NodeSuspect {
			t.Fatalf("n1: %s, want suspect", st)
		}
	})

	t.Run("malformed reply", func(t *testing.T) {
		for _, bad := range []string{`{"id":`, `[1,2]`, `{"error":{`, ``} {
			bus.handle("n1", "get", func(context.Context, map[string]string, []byte) ([]byte, error) { return []byte(bad), nil })
			e := f.APIErr(500, api.CodeInternal, "GET", "/v1/sessions/n1/s1", nil)
			if !strings.Contains(e.Message, "malformed") {
				t.Fatalf("%q: message %q", bad, e.Message)
			}
		}
		// A good reply makes the node alive again.
		bus.handle("n1", "get", reply(api.Session{Node: "n1", ID: "s1"}))
		f.Must(200, "GET", "/v1/sessions/n1/s1", nil, nil)
		if st := nodeStatus(f, "n1"); st != api.NodeAlive {
			t.Fatalf("n1 after an answer: %s", st)
		}
	})

	t.Run("bus error", func(t *testing.T) {
		bus.handle("n1", "screen", func(context.Context, map[string]string, []byte) ([]byte, error) {
			return nil, errors.New("nats: connection closed")
		})
		e := f.APIErr(503, api.CodeUnavailable, "GET", "/v1/sessions/n1/s1/screen", nil)
		if strings.Contains(e.Message, "connection closed") {
			t.Fatalf("the bus's own error reached the client: %q", e.Message)
		}
	})

	t.Run("slow node", func(t *testing.T) {
		h := newHang()
		bus.handle("n1", "screen", h.respond)
		start := time.Now()
		e := f.APIErr(504, api.CodeTimeout, "GET", "/v1/sessions/n1/s1/screen", nil)
		quick(time.Since(start), "a slow node")
		if !strings.Contains(e.Message, "did not answer screen within 100ms") {
			t.Fatalf("message %q", e.Message)
		}
		h.waitEnded(t, time.Second)
		if st := nodeStatus(f, "n1"); st != api.NodeSuspect {
			t.Fatalf("n1 after a timeout: %s, want suspect", st)
		}
	})

	t.Run("node gone mid-call", func(t *testing.T) {
		f.Ctl.Observe(controller.Member{Name: "n1", Addr: "127.0.0.1:1", State: api.NodeAlive, Meta: api.NodeMeta{Name: "n1"}})
		h := newHang()
		bus.handle("n1", "run", h.respond) // a run waits far longer than RequestTimeout
		type result struct {
			code int
			body []byte
			at   time.Time
		}
		done := make(chan result, 1)
		go func() {
			code, body := f.Do("POST", "/v1/sessions/n1/s1/run", api.RunBody{Command: "sleep 60", TimeoutMS: 60000})
			done <- result{code, body, time.Now()}
		}()
		h.waitStarted(t)
		gone := time.Now()
		f.Ctl.Observe(controller.Member{Name: "n1", State: api.NodeDead})
		h.waitEnded(t, time.Second) // after the grace
		select {
		case r := <-done:
			quick(r.at.Sub(gone), "failing a request to a node that went down")
			var env api.ErrorReply
			if r.code != 503 || json.Unmarshal(r.body, &env) != nil || env.Error == nil || !strings.Contains(env.Error.Message, "went down during the request") {
				t.Fatalf("%d %s", r.code, r.body)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the request to a node that went down hangs")
		}
		// Dead: refused without asking the bus.
		before := len(bus.sent(api.Subjects{}.RPC("n1", "get")))
		f.APIErr(503, api.CodeUnavailable, "GET", "/v1/sessions/n1/s1", nil)
		if after := len(bus.sent(api.Subjects{}.RPC("n1", "get"))); after != before {
			t.Fatal("a request to a dead node reached the bus")
		}
	})

	t.Run("client cancels", func(t *testing.T) {
		f.Ctl.Observe(controller.Member{Name: "n1", Addr: "127.0.0.1:1", State: api.NodeAlive, Meta: api.NodeMeta{Name: "n1"}})
		h := newHang()
		bus.handle("n1", "wait", h.respond)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", f.Base+"/v1/sessions/n1/s1/wait?until=idle&timeout_ms=60000", nil)
		req.Header.Set("Authorization", "Bearer "+f.Token)
		errc := make(chan error, 1)
		go func() {
			resp, err := f.HTTP.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		h.waitStarted(t)
		cancel()
		h.waitEnded(t, 2*time.Second) // the client's cancel reached the bus
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("client: %v", err)
		}
	})

	t.Run("unknown node", func(t *testing.T) {
		f.APIErr(404, api.CodeNotFound, "GET", "/v1/sessions/nobody/s1", nil)
		if n := len(bus.sent(api.Subjects{}.RPC("nobody", "get"))); n != 0 {
			t.Fatal("a request to an unknown node reached the bus")
		}
	})
}

// TestFakeOutputPaging: GET .../output without follow pages through the node's
// read verb (never asking more than a page) and returns the range byte for byte;
// a node that fails mid-range gives a short body, never a silently shorter one.
func TestFakeOutputPaging(t *testing.T) {
	f, bus := newFakeFixture(t, map[string]int{"n1": 1}, nil)
	out := make([]byte, 2*api.MaxReadBytes+4321)
	for i := range out {
		out[i] = byte(i * 7)
	}
	var mu sync.Mutex // guards failAt and maxes: the responder runs on the controller's goroutines
	var failAt int64 = -1
	var maxes []int
	// The output keeps growing after the request arrived: read k sees an end of
	// len(out)-300+100k. The reply stops at the end the first read saw.
	visible := func() int64 { return min(int64(len(out)), int64(len(out)-300+100*len(maxes))) }
	bus.handle("n1", "read", func(_ context.Context, _ map[string]string, data []byte) ([]byte, error) {
		var r api.ReadRequest
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		maxes = append(maxes, r.Max)
		if failAt >= 0 && r.From >= failAt {
			return nil, api.Errorf(api.CodeGone, "no longer readable")
		}
		n := r.Max
		if n == 0 || n > api.MaxReadBytes {
			n = api.MaxReadBytes
		}
		end := visible()
		from := min(r.From, end)
		to := min(from+int64(n), end)
		return json.Marshal(api.ReadReply{Offset: r.From, Data: out[from:to], End: end})
	})
	get := func(query string) (*http.Response, []byte, error) {
		req, _ := http.NewRequest("GET", f.Base+"/v1/sessions/n1/s1/output?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+f.Token)
		resp, err := f.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	reads := func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(maxes) }
	resp, b, err := get("from=10")
	want := out[10 : len(out)-200]
	if err != nil || !bytes.Equal(b, want) || resp.Header.Get(api.HeaderEnd) != fmt.Sprint(len(out)-200) {
		t.Fatalf("from=10: %d bytes (want %d), end %s, %v", len(b), len(want), resp.Header.Get(api.HeaderEnd), err)
	}
	sizes := reads()
	for _, m := range sizes {
		if m <= 0 || m > api.MaxReadBytes {
			t.Fatalf("read sizes %v: each must be a page at most", sizes)
		}
	}
	if len(sizes) != 3 {
		t.Fatalf("%d reads for %d bytes: %v", len(sizes), len(want), sizes)
	}

	mu.Lock()
	maxes = nil
	mu.Unlock()
	if _, b, err := get(fmt.Sprintf("from=5&max_bytes=%d", api.MaxReadBytes+1)); err != nil || !bytes.Equal(b, out[5:5+api.MaxReadBytes+1]) {
		t.Fatalf("max_bytes over a page: %d bytes, %v", len(b), err)
	}
	if sizes := reads(); len(sizes) != 2 || sizes[1] != 1 {
		t.Fatalf("read sizes for a page and a byte: %v", sizes)
	}

	mu.Lock()
	failAt = api.MaxReadBytes + 100
	mu.Unlock()
	resp, b, err = get("from=100")
	if resp.StatusCode != 200 || err == nil || len(b) != api.MaxReadBytes || !bytes.Equal(b, out[100:100+len(b)]) {
		t.Fatalf("a range cut short: status %d, %d bytes, err %v: want a short body and an error", resp.StatusCode, len(b), err)
	}
	// The first read's error is the reply.
	f.APIErr(410, api.CodeGone, "GET", fmt.Sprintf("/v1/sessions/n1/s1/output?from=%d", failAt), nil)
}

// TestFakeBlockOutlivesRequestTimeout: rendering a large block (a grep through many MB)
// is work on the node, so a block request may take longer than a request that only
// reads state, without being cut off at RequestTimeout.
func TestFakeBlockOutlivesRequestTimeout(t *testing.T) {
	f, bus := newFakeFixture(t, map[string]int{"n1": 0}, func(c *controller.Config) { c.RequestTimeout = 100 * time.Millisecond })
	started, release := make(chan struct{}), make(chan struct{})
	bus.handle("n1", "block", func(ctx context.Context, _ map[string]string, _ []byte) ([]byte, error) {
		close(started)
		select {
		case <-release:
			return json.Marshal(api.BlockResult{Block: api.Block{N: 1, State: api.BlockDone}, Text: "4242: 4242"})
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	type result struct {
		code int
		body []byte
	}
	done := make(chan result, 1)
	go func() {
		code, body := f.Do("GET", "/v1/sessions/n1/s1/blocks/1?grep=4242", nil)
		done <- result{code, body}
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the block request never reached the bus")
	}
	// A state request to the same node times out at RequestTimeout meanwhile, so the
	// block request has been waiting longer than that when it is answered.
	h := newHang()
	bus.handle("n1", "screen", h.respond)
	f.APIErr(504, api.CodeTimeout, "GET", "/v1/sessions/n1/s1/screen", nil)
	close(release)
	r := <-done
	if r.code != 200 || !strings.Contains(string(r.body), "4242: 4242") {
		t.Fatalf("block after more than RequestTimeout: %d %s", r.code, r.body)
	}
}
