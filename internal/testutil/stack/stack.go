// Package stack is the real-stack fixture of the controller's and the front
// doors' tests: an embedded NATS server, node agents (real PTYs, real shells) each
// in the gossip cluster over loopback, and a controller whose node table is fed by
// its own gossip member, with its HTTP API (and /mcp) and HTTP helpers against it.
//
// It is its own package, not part of testutil, because it imports node (and so
// session), whose in-package tests import testutil.
package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/mcpserver"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/gossip"
	"github.com/prometheus/client_golang/prometheus"
)

// Stack is a real stack on this machine: an embedded NATS server, node agents
// (real PTYs, real shells) each in the gossip cluster over loopback, and a
// controller whose node table is fed by its own gossip member, with its HTTP API.
// Everything stops at T's cleanup. Tests may build a Stack of their own (T, Ctl,
// Base, HTTP) to use the HTTP helpers against another controller.
type Stack struct {
	T      *testing.T // fails the helpers; tests may swap it for a subtest's
	NATS   *transport.Server
	Bus    *transport.Conn // the controller's bus
	Ctl    *controller.Controller
	API    *httpapi.Server // the controller's HTTP API, /mcp included
	Gossip *gossip.Gossip  // the controller's gossip member
	Base   string          // http://127.0.0.1:PORT
	Nodes  map[string]*Node
	Token  string // the bearer token the helpers send ("" sends none)
	HTTP   *http.Client
	Trust  *testutil.Trust // the fleet root; the controller signs as "ctl"
	Policy bool            // nodes watch FLEETMUX_POLICY (Options.Policy)
	// NodeConfig, when set, changes every node's config before node.New (Options.Node).
	NodeConfig func(*node.Config)
}

// Node is one node agent of a Stack, on its own bus connection and gossip member.
type Node struct {
	Agent  *node.Node
	Bus    *transport.Conn
	Gossip *gossip.Gossip
}

// Options configures New; the zero value is nodes n1 (role=web) and n2 (role=db)
// and the Token bootstrap token.
type Options struct {
	Nodes  map[string]map[string]string // name → labels; nil: n1 and n2
	Token  string                       // the bootstrap (admin) token; "": Token
	Store  bool                         // tokens in the FLEETMUX_TOKENS bucket of the stack's NATS
	Policy bool                         // the guardrail policy in the FLEETMUX_POLICY bucket: /v1/policy sets it, the nodes enforce it
	Config func(*controller.Config)     // changes the controller's config before New
	Node   func(*node.Config)           // changes every node's config before node.New
}

// Token is the stacks' default bootstrap admin token.
const Token = "test-bootstrap-token"

// GossipKey is the stacks' gossip key (gossip never runs without one).
var GossipKey = []byte("fleetmux-test-gossip-key-32bytes")

// Quiet is a logger that discards everything.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// New starts a stack (it needs bash) and waits until the controller sees every
// node alive. It sets HOME to a temporary dir so the sessions' shells do not read
// the tester's rc files.
func New(t *testing.T, o Options) *Stack {
	t.Helper()
	testutil.NeedTool(t, "bash")
	t.Setenv("HOME", t.TempDir()) // the sessions' shells must not read the tester's rc files
	if o.Nodes == nil {
		o.Nodes = map[string]map[string]string{"n1": {"role": "web"}, "n2": {"role": "db"}}
	}
	if o.Token == "" {
		o.Token = Token
	}
	f := &Stack{T: t, Nodes: map[string]*Node{}, Token: o.Token, HTTP: &http.Client{Timeout: 60 * time.Second}, Trust: testutil.NewTrust(t), Policy: o.Policy, NodeConfig: o.Node}
	f.NATS = testutil.StartNATS(t, t.TempDir())
	ctx := context.Background()
	var err error
	f.Bus, err = transport.Connect(ctx, transport.NATSConfig{URL: f.NATS.ClientURL(), Name: "controller", Logger: Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Bus.Close() })
	cfg := controller.Config{Name: "ctl", Bus: f.Bus, Signer: f.Trust.Signer, Token: o.Token, Logger: Quiet(), Registry: prometheus.NewRegistry()}
	if o.Store {
		kv, err := transport.OpenKV(ctx, f.Bus.NC(), api.BucketTokens, Quiet())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Tokens = kv
	}
	if o.Policy {
		cfg.Policy = transport.NewPolicy(f.Bus.NC(), Quiet())
	}
	if o.Config != nil {
		o.Config(&cfg)
	}
	f.Ctl, err = controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.Gossip, err = gossip.Start(ctx, gossip.Config{
		Name: "ctl", Logger: Quiet(), SecretKey: GossipKey, Meta: api.NodeMeta{Name: "ctl", Role: api.RoleController},
		OnChange: func(m gossip.Member) {
			f.Ctl.Observe(controller.Member{Name: m.Name, Addr: m.Addr, State: m.State, Meta: m.Meta})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.API = StartAPI(t, f.Ctl, cfg.Registry, func() {
		if err := f.Ctl.Close(); err != nil {
			t.Errorf("controller close: %v", err)
		}
		f.Gossip.Close()
	})
	f.Base = "http://" + f.API.Addr()
	for name, labels := range o.Nodes {
		f.StartNode(name, labels)
	}
	f.WaitNodes(api.NodeAlive, keys(o.Nodes)...)
	return f
}

// StartAPI starts ctl and its HTTP API (with /mcp) on a loopback port, its
// metrics on reg. At T's cleanup the API closes, then closed runs (it closes the
// controller).
func StartAPI(t *testing.T, ctl *controller.Controller, reg *prometheus.Registry, closed func()) *httpapi.Server {
	t.Helper()
	h, err := httpapi.New(httpapi.Config{Listen: "127.0.0.1:0", Fleet: ctl, MCP: MCP(ctl), Registry: reg, Logger: Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("http api close: %v", err)
		}
		closed()
	})
	return h
}

// MCP builds /mcp over ctl as cmd/fleetmux does: tool calls act with the role of
// the request's token, labelled by their MCP client, and audited.
func MCP(ctl *controller.Controller) func(httpapi.MCPOptions) (http.Handler, httpapi.MCPServer) {
	return func(o httpapi.MCPOptions) (http.Handler, httpapi.MCPServer) {
		m := mcpserver.New(ctl, mcpserver.Options{
			Context:   o.Context,
			Logger:    Quiet(),
			WithActor: controller.WithActor,
			WithCaller: func(ctx context.Context, principal, role string) context.Context {
				return ctl.WithCaller(ctx, "", principal, role)
			},
			Audit: func(_ context.Context, rec api.AuditRecord) { ctl.Audit(rec) },
		})
		return m.Handler(mcpserver.HTTPOptions{Closing: o.Closing, Caller: o.Caller}), m
	}
}

func keys(m map[string]map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// StartNode starts a node agent on its own bus connection, in the gossip cluster.
func (f *Stack) StartNode(name string, labels map[string]string) *Node {
	t := f.T
	t.Helper()
	ctx := context.Background()
	conn, err := transport.Connect(ctx, transport.NATSConfig{URL: f.NATS.ClientURL(), Name: name, Logger: Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gossip.Start(ctx, gossip.Config{
		Name: name, Logger: Quiet(), Join: []string{f.Gossip.Addr()}, SecretKey: GossipKey,
		Meta: api.NodeMeta{Name: name, Labels: labels, Version: "0.1.0", Proto: api.ProtocolVersion},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{Name: name, Labels: labels, DataDir: t.TempDir(), Bus: conn, Verifier: f.Trust.NewVerifier(t), Gossip: g, Logger: Quiet(), Version: "0.1.0"}
	if f.Policy {
		cfg.Policy = transport.NewPolicyReader(conn.NC(), Quiet())
	}
	if f.NodeConfig != nil {
		f.NodeConfig(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	fn := &Node{Agent: n, Bus: conn, Gossip: g}
	f.Nodes[name] = fn
	t.Cleanup(fn.Stop)
	return fn
}

// Stop stops a node the way a clean shutdown does (idempotent).
func (fn *Node) Stop() {
	fn.Agent.Close()
	fn.Gossip.Close()
	fn.Bus.Close()
}

// WaitNodes waits until the controller's table shows each node in status.
func (f *Stack) WaitNodes(status string, names ...string) {
	f.T.Helper()
	testutil.Eventually(f.T, 15*time.Second, func() bool {
		have := map[string]string{}
		nodes, _ := f.Ctl.Nodes(context.Background())
		for _, n := range nodes.Nodes {
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

// Do sends a request and returns the status and body. body: nil, []byte (sent as
// is), or a value sent as JSON.
func (f *Stack) Do(method, path string, body any, hdr ...string) (int, []byte) {
	f.T.Helper()
	var rd io.Reader
	ct := ""
	switch b := body.(type) {
	case nil:
	case []byte:
		rd, ct = bytes.NewReader(b), "application/json"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			f.T.Fatal(err)
		}
		rd, ct = bytes.NewReader(j), "application/json"
	}
	req, err := http.NewRequest(method, f.Base+path, rd)
	if err != nil {
		f.T.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if f.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.Token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.HTTP.Do(req)
	if err != nil {
		f.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		f.T.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, out
}

// Must sends a request that must answer want, and decodes the reply into out.
func (f *Stack) Must(want int, method, path string, body, out any) {
	f.T.Helper()
	code, b := f.Do(method, path, body)
	if code != want {
		f.T.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			f.T.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// APIErr sends a request that must fail with status and code.
func (f *Stack) APIErr(status int, code, method, path string, body any, hdr ...string) *api.Error {
	f.T.Helper()
	got, b := f.Do(method, path, body, hdr...)
	var env api.ErrorReply
	if err := json.Unmarshal(b, &env); err != nil || env.Error == nil {
		f.T.Fatalf("%s %s: not a JSON error (%d): %s", method, path, got, b)
	}
	if got != status || env.Error.Code != code {
		f.T.Fatalf("%s %s: %d %s (%s), want %d %s", method, path, got, env.Error.Code, env.Error.Message, status, code)
	}
	if env.Error.Message == "" {
		f.T.Fatalf("%s %s: error without a message", method, path)
	}
	return env.Error
}

// NewSession creates a session on node and waits until it is idle.
func (f *Stack) NewSession(node string) api.Session {
	f.T.Helper()
	var s api.Session
	f.Must(http.StatusCreated, "POST", "/v1/sessions", api.NewSession{Node: node}, &s)
	var w api.WaitResult
	f.Must(http.StatusOK, "GET", fmt.Sprintf("/v1/sessions/%s/%s/wait?until=idle&timeout_ms=10000", s.Node, s.ID), nil, &w)
	if !w.OK {
		f.T.Fatalf("session %s/%s not idle: %+v", s.Node, s.ID, w.Session)
	}
	return w.Session
}

// Run runs cmd in session node/id and returns its block (20s at most).
func (f *Stack) Run(node, id, cmd string) api.BlockResult {
	f.T.Helper()
	var br api.BlockResult
	f.Must(http.StatusOK, "POST", "/v1/sessions/"+node+"/"+id+"/run", api.RunBody{Command: cmd, TimeoutMS: 20000}, &br)
	return br
}

// Remote is a Stack of only the HTTP helpers (Do, Must, APIErr, NewSession, Run)
// for a controller a test started another way, such as a real `fleetmux dev`:
// base is its HTTP API's URL, token the bearer token the helpers send.
func Remote(t *testing.T, base, token string) *Stack {
	return &Stack{T: t, Base: strings.TrimRight(base, "/"), Token: token, HTTP: &http.Client{Timeout: 60 * time.Second}}
}
