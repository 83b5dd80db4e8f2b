package sshd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/nats-io/nats.go"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

// fixture is a real stack on this machine for the front door to act on: an
// embedded NATS server, node agents (real PTYs, real shells) in the gossip cluster
// over loopback, and a controller whose node table is fed by its own gossip member.
// The tests may import what the package may not (controller, node, transport).
type fixture struct {
	t     *testing.T
	srv   *transport.Server
	ctl   *controller.Controller
	base  string // http://127.0.0.1:PORT
	token string
	http  *http.Client
}

type fixtureOpts struct {
	nodes  map[string]map[string]string // name → labels
	config func(*controller.Config)
}

// testToken is the fixtures' bootstrap admin token.
const testToken = "test-bootstrap-token"

// gossipKey is the fixtures' gossip key (gossip never runs without one).
var gossipKey = []byte("fleetmux-test-gossip-key-32bytes")

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newFixture(t *testing.T, o fixtureOpts) *fixture {
	t.Helper()
	testutil.NeedTool(t, "bash")
	t.Setenv("HOME", t.TempDir()) // the sessions' shells must not read the tester's rc files
	f := &fixture{t: t, token: testToken, http: &http.Client{Timeout: 60 * time.Second}}
	tr := testutil.NewTrust(t)
	f.srv = testutil.StartNATS(t, t.TempDir())
	ctx := context.Background()
	conn, err := transport.Connect(ctx, transport.NATSConfig{URL: f.srv.ClientURL(), Name: "controller", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cfg := controller.Config{Name: "ctl", Bus: conn, Signer: tr.Signer, HTTPListen: "127.0.0.1:0", Token: testToken, Logger: quiet()}
	if o.config != nil {
		o.config(&cfg)
	}
	if f.ctl, err = controller.New(cfg); err != nil {
		t.Fatal(err)
	}
	cg, err := transport.StartGossip(ctx, transport.GossipConfig{
		Name: "ctl", Logger: quiet(), SecretKey: gossipKey, Meta: api.NodeMeta{Name: "ctl", Role: api.RoleController},
		OnChange: func(m transport.Member) {
			f.ctl.Observe(controller.Member{Name: m.Name, Addr: m.Addr, State: m.State, Meta: m.Meta})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ctl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.ctl.Close(); err != nil {
			t.Errorf("controller close: %v", err)
		}
		cg.Close()
	})
	f.base = "http://" + f.ctl.Addr()
	var names []string
	for name, labels := range o.nodes {
		conn, err := transport.Connect(ctx, transport.NATSConfig{URL: f.srv.ClientURL(), Name: name, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		g, err := transport.StartGossip(ctx, transport.GossipConfig{
			Name: name, Logger: quiet(), Join: []string{cg.Addr()}, SecretKey: gossipKey,
			Meta: api.NodeMeta{Name: name, Labels: labels, Version: "0.1.0", Proto: api.ProtocolVersion},
		})
		if err != nil {
			t.Fatal(err)
		}
		n, err := node.New(node.Config{Name: name, Labels: labels, DataDir: t.TempDir(), Bus: conn, Verifier: tr.NewVerifier(t), Gossip: g, Logger: quiet(), Version: "0.1.0"})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close(); g.Close(); conn.Close() })
		names = append(names, name)
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		have := map[string]string{}
		for _, n := range f.ctl.Nodes() {
			have[n.Name] = n.Status
		}
		for _, n := range names {
			if have[n] != api.NodeAlive {
				return false
			}
		}
		return true
	}, "nodes %v to be alive", names)
	return f
}

// do sends a request and returns the status and body. body: nil, []byte (sent as
// is), or a value sent as JSON.
func (f *fixture) do(method, path string, body any, hdr ...string) (int, []byte) {
	f.t.Helper()
	var rd io.Reader
	ct := ""
	switch b := body.(type) {
	case nil:
	case []byte:
		rd, ct = bytes.NewReader(b), "application/json"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		rd, ct = bytes.NewReader(j), "application/json"
	}
	req, err := http.NewRequest(method, f.base+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.http.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, out
}

// must sends a request that must answer want, and decodes the reply into out.
func (f *fixture) must(want int, method, path string, body, out any) {
	f.t.Helper()
	code, b := f.do(method, path, body)
	if code != want {
		f.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			f.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// newSession creates a session on node and waits until it is idle.
func (f *fixture) newSession(node string) api.Session {
	f.t.Helper()
	var s api.Session
	f.must(http.StatusCreated, "POST", "/v1/sessions", api.NewSession{Node: node}, &s)
	var w api.WaitResult
	f.must(http.StatusOK, "GET", fmt.Sprintf("/v1/sessions/%s/%s/wait?until=idle&timeout_ms=10000", s.Node, s.ID), nil, &w)
	if !w.OK {
		f.t.Fatalf("session %s/%s not idle: %+v", s.Node, s.ID, w.Session)
	}
	return w.Session
}

func (f *fixture) run(node, id, cmd string) api.BlockResult {
	f.t.Helper()
	var br api.BlockResult
	f.must(http.StatusOK, "POST", "/v1/sessions/"+node+"/"+id+"/run", api.RunBody{Command: cmd, TimeoutMS: 20000}, &br)
	return br
}

// auditSub subscribes to a node's audit records with a raw NATS client.
func auditSub(t *testing.T, f *fixture, node string) (*nats.Conn, chan api.AuditRecord) {
	t.Helper()
	nc, err := nats.Connect(f.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	recs := make(chan api.AuditRecord, 64)
	if _, err := nc.Subscribe(api.Subjects{}.Audit(node), func(m *nats.Msg) {
		var r api.AuditRecord
		if json.Unmarshal(m.Data, &r) == nil {
			recs <- r
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc, recs
}

// nextAudit waits for the next record of action.
func nextAudit(t *testing.T, recs chan api.AuditRecord, action string) api.AuditRecord {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-recs:
			if r.Action == action {
				return r
			}
		case <-deadline:
			t.Fatalf("no audit record of %s", action)
		}
	}
}
