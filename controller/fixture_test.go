package controller_test

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
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

// fixture is a real stack on this machine: an embedded NATS server, node agents
// (real PTYs, real shells) each in the gossip cluster over loopback, and a
// controller whose node table is fed by its own gossip member.
type fixture struct {
	t     *testing.T
	srv   *transport.Server
	conn  *transport.Conn // the controller's bus
	ctl   *controller.Controller
	cg    *transport.Gossip
	base  string // http://127.0.0.1:PORT
	nodes map[string]*fnode
	token string
	http  *http.Client
	trust *testutil.Trust // the fleet root; the controller signs as "ctl"
}

type fnode struct {
	n    *node.Node
	conn *transport.Conn
	g    *transport.Gossip
}

type fixtureOpts struct {
	nodes  map[string]map[string]string // name → labels
	token  string                       // the bootstrap (admin) token; default testToken
	store  bool                         // tokens in the FLEETMUX_TOKENS bucket of the fixture's NATS
	config func(*controller.Config)
}

// testToken is the fixtures' bootstrap admin token.
const testToken = "test-bootstrap-token"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newFixture(t *testing.T, o fixtureOpts) *fixture {
	t.Helper()
	testutil.NeedTool(t, "bash")
	t.Setenv("HOME", t.TempDir()) // the sessions' shells must not read the tester's rc files
	if o.nodes == nil {
		o.nodes = map[string]map[string]string{"n1": {"role": "web"}, "n2": {"role": "db"}}
	}
	if o.token == "" {
		o.token = testToken
	}
	f := &fixture{t: t, nodes: map[string]*fnode{}, token: o.token, http: &http.Client{Timeout: 60 * time.Second}, trust: testutil.NewTrust(t)}
	f.srv = testutil.StartNATS(t, t.TempDir())
	ctx := context.Background()
	var err error
	f.conn, err = transport.Connect(ctx, transport.NATSConfig{URL: f.srv.ClientURL(), Name: "controller", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	cfg := controller.Config{Name: "ctl", Bus: f.conn, Signer: f.trust.Signer, HTTPListen: "127.0.0.1:0", Token: o.token, Logger: quiet()}
	if o.store {
		kv, err := transport.OpenKV(ctx, f.conn.NC(), transport.BucketTokens, quiet())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Tokens = kv
	}
	if o.config != nil {
		o.config(&cfg)
	}
	f.ctl, err = controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.cg, err = transport.StartGossip(ctx, transport.GossipConfig{
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
		f.cg.Close()
	})
	f.base = "http://" + f.ctl.Addr()
	for name, labels := range o.nodes {
		f.startNode(name, labels)
	}
	f.waitNodes(api.NodeAlive, keys(o.nodes)...)
	return f
}

// gossipKey is the fixtures' gossip key (gossip never runs without one).
var gossipKey = []byte("fleetmux-test-gossip-key-32bytes")

func keys(m map[string]map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// startNode starts a node agent on its own bus connection, in the gossip cluster.
func (f *fixture) startNode(name string, labels map[string]string) *fnode {
	t := f.t
	t.Helper()
	ctx := context.Background()
	conn, err := transport.Connect(ctx, transport.NATSConfig{URL: f.srv.ClientURL(), Name: name, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	g, err := transport.StartGossip(ctx, transport.GossipConfig{
		Name: name, Logger: quiet(), Join: []string{f.cg.Addr()}, SecretKey: gossipKey,
		Meta: api.NodeMeta{Name: name, Labels: labels, Version: "0.1.0", Proto: api.ProtocolVersion},
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{Name: name, Labels: labels, DataDir: t.TempDir(), Bus: conn, Verifier: f.trust.NewVerifier(t), Gossip: g, Logger: quiet(), Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	fn := &fnode{n: n, conn: conn, g: g}
	f.nodes[name] = fn
	t.Cleanup(fn.stop)
	return fn
}

// stop stops a node the way a clean shutdown does (idempotent).
func (fn *fnode) stop() {
	fn.n.Close()
	fn.g.Close()
	fn.conn.Close()
}

// waitNodes waits until the controller's table shows each node in status.
func (f *fixture) waitNodes(status string, names ...string) {
	f.t.Helper()
	testutil.Eventually(f.t, 15*time.Second, func() bool {
		have := map[string]string{}
		for _, n := range f.ctl.Nodes() {
			have[n.Name] = n.Status
		}
		for _, n := range names {
			if have[n] != status {
				return false
			}
		}
		return true
	}, "nodes %v to be %s", names, status)
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

// apiErr sends a request that must fail with status and code.
func (f *fixture) apiErr(status int, code, method, path string, body any, hdr ...string) *api.Error {
	f.t.Helper()
	got, b := f.do(method, path, body, hdr...)
	var env api.ErrorReply
	if err := json.Unmarshal(b, &env); err != nil || env.Error == nil {
		f.t.Fatalf("%s %s: not a JSON error (%d): %s", method, path, got, b)
	}
	if got != status || env.Error.Code != code {
		f.t.Fatalf("%s %s: %d %s (%s), want %d %s", method, path, got, env.Error.Code, env.Error.Message, status, code)
	}
	if env.Error.Message == "" {
		f.t.Fatalf("%s %s: error without a message", method, path)
	}
	return env.Error
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
