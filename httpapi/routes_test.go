package httpapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/httpapi"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestSessionRoutes walks every session route on a real stack.
func TestSessionRoutes(t *testing.T) {
	f := newFixture(t, stack.Options{})

	var nodes api.NodeList
	f.Must(200, "GET", "/v1/nodes", nil, &nodes)
	if len(nodes.Nodes) != 2 || nodes.Nodes[0].Name != "n1" || nodes.Nodes[0].Status != api.NodeAlive ||
		nodes.Nodes[0].Labels["role"] != "web" || nodes.Nodes[0].Version != "0.1.0" || nodes.Nodes[0].Addr == "" {
		t.Fatalf("nodes: %+v", nodes)
	}

	// Create without a node: the controller picks one; with labels and a title.
	var s api.Session
	f.Must(201, "POST", "/v1/sessions", api.NewSession{CreateRequest: api.CreateRequest{
		Title: "build", Description: "the nightly build", Labels: map[string]string{"team": "infra"}, Shell: "bash",
	}}, &s)
	if s.Node == "" || s.ID == "" || s.Title != "build" {
		t.Fatalf("created %+v", s)
	}
	path := "/v1/sessions/" + s.Node + "/" + s.ID
	br := f.Run(s.Node, s.ID, "echo hi; false")
	if br.Text != "hi" || br.Block.ExitCode == nil || *br.Block.ExitCode != 1 || br.Block.N != 1 || br.Session.State != "idle" {
		t.Fatalf("run: %+v", br)
	}
	var got api.Session
	f.Must(200, "GET", path, nil, &got)
	if got.LastExitCode == nil || *got.LastExitCode != 1 || got.Blocks != 1 {
		t.Fatalf("get: %+v", got)
	}

	// Lists: fleet-wide, by node, by session label and by node label.
	var list api.SessionList
	f.Must(200, "GET", "/v1/sessions", nil, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].ID != s.ID || len(list.Unavailable) != 0 {
		t.Fatalf("list: %+v", list)
	}
	other := "n1"
	if s.Node == "n1" {
		other = "n2"
	}
	f.Must(200, "GET", "/v1/sessions?node="+other, nil, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("list of %s: %+v", other, list)
	}
	f.Must(200, "GET", "/v1/sessions?label=team=infra", nil, &list)
	if len(list.Sessions) != 1 {
		t.Fatalf("by session label: %+v", list)
	}
	nodeRole := map[string]string{"n1": "web", "n2": "db"}[s.Node]
	f.Must(200, "GET", "/v1/sessions?label=role="+nodeRole+"&label=team=infra", nil, &list)
	if len(list.Sessions) != 1 {
		t.Fatalf("by node label: %+v", list)
	}
	f.Must(200, "GET", "/v1/sessions?label=team=other", nil, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("by a label nobody has: %+v", list)
	}

	// PATCH changes only what it names.
	title := "build-2"
	f.Must(200, "PATCH", path, api.SessionPatch{Title: &title}, &got)
	if got.Title != "build-2" || got.Description != "the nightly build" {
		t.Fatalf("patch: %+v", got)
	}

	// Blocks, one block with grep.
	f.Run(s.Node, s.ID, "printf 'a1\\nb2\\na3\\n'")
	var bl api.BlockList
	f.Must(200, "GET", path+"/blocks", nil, &bl)
	if len(bl.Blocks) != 2 || bl.Blocks[1].Command != "printf 'a1\\nb2\\na3\\n'" {
		t.Fatalf("blocks: %+v", bl)
	}
	var b2 api.BlockResult
	f.Must(200, "GET", path+"/blocks/2?grep=a", nil, &b2)
	if b2.Text != "1: a1\n3: a3" {
		t.Fatalf("block 2 grep a: %q", b2.Text)
	}
	f.Must(200, "GET", path+"/blocks/2?offset=1&limit=1", nil, &b2)
	if b2.Text != "b2" {
		t.Fatalf("block 2 offset 1 limit 1: %q", b2.Text)
	}

	// Input, keys and the screen; wait for waiting_input.
	f.Must(200, "POST", path+"/input", api.InputBody{Data: "read -p 'name? ' x; echo got-$x\n"}, nil)
	var w api.WaitResult
	f.Must(200, "GET", path+"/wait?until=waiting_input&timeout_ms=10000", nil, &w)
	if !w.OK || w.Session.State != "waiting_input" {
		t.Fatalf("wait waiting_input: %+v", w)
	}
	var sc api.Screen
	f.Must(200, "GET", path+"/screen", nil, &sc)
	if !strings.Contains(sc.Text, "name? ") || !sc.WaitingInput || sc.Cols == 0 {
		t.Fatalf("screen: %+v", sc)
	}
	f.Must(200, "POST", path+"/input", api.InputBody{Data: "bob"}, nil)
	f.Must(200, "POST", path+"/keys", api.KeysBody{Keys: []string{"Enter"}}, nil)
	f.Must(200, "GET", path+"/wait?until=idle&timeout_ms=10000", nil, &w)
	if !w.OK || w.Block.N != 3 || !strings.Contains(w.Text, "got-bob") {
		t.Fatalf("wait idle: %+v", w)
	}
	// A wait that times out says so (ok false) with the session as it is.
	f.Must(200, "GET", path+"/wait?until=exited&timeout_ms=50", nil, &w)
	if w.OK || w.Session.State != "idle" {
		t.Fatalf("wait timeout: %+v", w)
	}

	// Resize; raw output.
	f.Must(200, "POST", path+"/resize", api.ResizeBody{Cols: 100, Rows: 30}, &got)
	if got.Cols != 100 || got.Rows != 30 {
		t.Fatalf("resize: %+v", got)
	}
	code, raw := f.Do("GET", path+"/output?from=0", nil)
	if code != 200 || !strings.Contains(string(raw), "got-bob") {
		t.Fatalf("output: %d %q", code, raw)
	}
	code, part := f.Do("GET", path+"/output?from=5&max_bytes=7", nil)
	if code != 200 || string(part) != string(raw[5:12]) {
		t.Fatalf("output from 5 max_bytes 7: %q, want %q", part, raw[5:12])
	}
	f.APIErr(400, api.CodeBadRequest, "GET", path+"/output?from=5&max=7", nil) // the old name is refused, not ignored

	// Close; the session is then gone.
	f.Must(200, "DELETE", path, nil, &got)
	if got.State != "exited" {
		t.Fatalf("close: %+v", got)
	}
	f.APIErr(404, api.CodeNotFound, "GET", path, nil)
}

// TestBadInput: every kind of bad input gets the documented JSON error and
// changes nothing.
func TestBadInput(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	p := "/v1/sessions/n1/" + s.ID
	big := `{"command":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               string
		hdr                []string
	}{
		{"bad node name", "GET", "/v1/sessions/bad.name/s1", nil, 400, api.CodeBadRequest, nil},
		{"bad session id", "GET", "/v1/sessions/n1/s%20x", nil, 400, api.CodeBadRequest, nil},
		{"unknown node", "GET", "/v1/sessions/nope/s1", nil, 404, api.CodeNotFound, nil},
		{"unknown session", "GET", "/v1/sessions/n1/s999", nil, 404, api.CodeNotFound, nil},
		{"unknown node run", "POST", "/v1/sessions/nope/s1/run", api.RunBody{Command: "true"}, 404, api.CodeNotFound, nil},
		{"unknown node create", "POST", "/v1/sessions", api.NewSession{Node: "nope"}, 404, api.CodeNotFound, nil},
		{"bad node create", "POST", "/v1/sessions", api.NewSession{Node: "a b"}, 400, api.CodeBadRequest, nil},
		{"malformed JSON", "POST", p + "/run", []byte(`{"command":`), 400, api.CodeBadRequest, nil},
		{"not an object", "POST", p + "/run", []byte(`[1,2]`), 400, api.CodeBadRequest, nil},
		{"two values", "POST", p + "/run", []byte(`{"command":"true"}{}`), 400, api.CodeBadRequest, nil},
		{"unknown field", "POST", p + "/run", []byte(`{"cmd":"true"}`), 400, api.CodeBadRequest, nil},
		{"empty body", "POST", p + "/run", []byte(``), 400, api.CodeBadRequest, nil},
		{"empty command", "POST", p + "/run", api.RunBody{Command: "  "}, 400, api.CodeBadRequest, nil},
		{"oversized body", "POST", p + "/run", []byte(big), 413, api.CodeTooLarge, nil},
		{"oversized command", "POST", p + "/run", api.RunBody{Command: strings.Repeat("x", api.MaxCommandBytes+1)}, 413, api.CodeTooLarge, nil},
		{"oversized input", "POST", p + "/input", api.InputBody{Data: strings.Repeat("x", 600<<10)}, 413, api.CodeTooLarge, nil},
		{"bad key", "POST", p + "/keys", api.KeysBody{Keys: []string{"C-nope"}}, 400, api.CodeBadRequest, nil},
		{"negative timeout", "POST", p + "/run", api.RunBody{Command: "true", TimeoutMS: -1}, 400, api.CodeBadRequest, nil},
		{"bad resize", "POST", p + "/resize", api.ResizeBody{Cols: -1, Rows: 0}, 400, api.CodeBadRequest, nil},
		{"bad block number", "GET", p + "/blocks/x", nil, 400, api.CodeBadRequest, nil},
		{"block zero", "GET", p + "/blocks/0", nil, 400, api.CodeBadRequest, nil},
		{"missing block", "GET", p + "/blocks/99", nil, 404, api.CodeNotFound, nil},
		{"bad query int", "GET", p + "/output?from=-1", nil, 400, api.CodeBadRequest, nil},
		{"bad query int 2", "GET", p + "/output?from=1e3", nil, 400, api.CodeBadRequest, nil},
		{"bad follow", "GET", p + "/output?follow=yes", nil, 400, api.CodeBadRequest, nil},
		{"bad until", "GET", p + "/wait?until=never", nil, 400, api.CodeBadRequest, nil},
		{"bad label filter", "GET", "/v1/sessions?label=novalue", nil, 400, api.CodeBadRequest, nil},
		{"bad title size", "PATCH", p, map[string]string{"title": strings.Repeat("t", 300)}, 413, api.CodeTooLarge, nil},
		{"text/plain body", "POST", p + "/run", nil, 400, api.CodeBadRequest, []string{"Content-Type", "text/plain"}},
		{"no route", "GET", "/v2/nodes", nil, 404, api.CodeNotFound, nil},
		{"wrong method", "PUT", "/v1/nodes", nil, 405, api.CodeBadRequest, nil},
		{"attach without upgrade", "GET", p + "/attach", nil, 400, api.CodeBadRequest, nil},
		{"cross-origin", "POST", p + "/run", api.RunBody{Command: "true"}, 403, api.CodeForbidden, []string{"Origin", "http://evil.example"}},
		{"no token", "POST", p + "/run", api.RunBody{Command: "true"}, 401, api.CodeUnauthorized, []string{"Authorization", ""}},
		{"wrong token", "POST", p + "/run", api.RunBody{Command: "true"}, 401, api.CodeUnauthorized, []string{"Authorization", "Bearer nope"}},
		{"cross origin", "POST", p + "/run", api.RunBody{Command: "true"}, 403, api.CodeForbidden, []string{"Origin", "http://evil.example"}},
		{"fanout empty selector", "POST", "/v1/run", api.FanoutRequest{Command: "true"}, 400, api.CodeBadRequest, nil},
		{"fanout no match", "POST", "/v1/run", api.FanoutRequest{Command: "true", Selector: api.Selector{Labels: map[string]string{"role": "none"}}}, 404, api.CodeNotFound, nil},
		{"fanout mixed selector", "POST", "/v1/run", api.FanoutRequest{Command: "true", Selector: api.Selector{All: true, Sessions: []string{"n1/s1"}}}, 400, api.CodeBadRequest, nil},
		{"fanout bad address", "POST", "/v1/run", api.FanoutRequest{Command: "true", Selector: api.Selector{Sessions: []string{"n1"}}}, 400, api.CodeBadRequest, nil},
		{"fanout bad node", "POST", "/v1/run", api.FanoutRequest{Command: "true", Selector: api.Selector{Nodes: []string{"a.b"}}}, 400, api.CodeBadRequest, nil},
		{"fanout empty command", "POST", "/v1/run", api.FanoutRequest{Selector: api.Selector{All: true}}, 400, api.CodeBadRequest, nil},
		{"fanout negative batch", "POST", "/v1/run", api.FanoutRequest{Command: "true", Batch: -1, Selector: api.Selector{All: true}}, 400, api.CodeBadRequest, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if tc.name == "text/plain body" {
				body = nil
			}
			f.T = t
			f.APIErr(tc.status, tc.code, tc.method, tc.path, body, tc.hdr...)
		})
	}
	f.T = t
	// Nothing changed: one session, no block ran, the shell is at its prompt.
	var list api.SessionList
	f.Must(200, "GET", "/v1/sessions", nil, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].Blocks != 0 || list.Sessions[0].State != "idle" || list.Sessions[0].Cols != s.Cols {
		t.Fatalf("after bad input: %+v", list)
	}
}

// TestAuth: with a token every route but /healthz needs it.
func TestAuth(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Token: "s3cret"})
	f.Must(200, "GET", "/v1/nodes", nil, nil)
	f.Token = ""
	f.APIErr(401, api.CodeUnauthorized, "GET", "/v1/nodes", nil)
	f.APIErr(401, api.CodeUnauthorized, "POST", "/v1/sessions", api.NewSession{Node: "n1"})
	f.APIErr(401, api.CodeUnauthorized, "GET", "/v1/nodes", nil, "Authorization", "Bearer wrong")
	f.APIErr(401, api.CodeUnauthorized, "GET", "/metrics", nil)
	f.Must(200, "GET", "/healthz", nil, nil)
	f.Token = "s3cret"
	// With a token, a non-loopback Host is fine (the API may listen beyond loopback).
	code, _ := f.Do("GET", "/v1/nodes", nil, "Host", "fleet.example:7070")
	if code != 200 {
		t.Fatalf("non-loopback host with token: %d", code)
	}
	var list api.SessionList
	f.Must(200, "GET", "/v1/sessions", nil, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("an unauthorized create created a session: %+v", list)
	}
}

func TestConfig(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{}})
	sg := f.Trust.Signer
	for _, tc := range []struct {
		cfg  controller.Config
		want error
	}{
		{controller.Config{}, controller.ErrConfig},
		{controller.Config{Bus: f.Bus}, controller.ErrConfig}, // no signer
		{controller.Config{Bus: f.Bus, Signer: sg, Name: "a.b"}, controller.ErrConfig},
		{controller.Config{Bus: f.Bus, Signer: sg, Prefix: "a..b"}, controller.ErrConfig},
		{controller.Config{Bus: f.Bus, Signer: sg}, controller.ErrInsecure}, // no token: loopback is shared by every local user
	} {
		if _, err := controller.New(tc.cfg); !errors.Is(err, tc.want) {
			t.Errorf("New(%+v): %v, want %v", tc.cfg, err, tc.want)
		}
	}
	if _, err := controller.New(controller.Config{Bus: f.Bus, Signer: sg, Token: "x"}); err != nil {
		t.Errorf("with a token: %v", err)
	}
	for _, tc := range []struct {
		cfg  httpapi.Config
		want error
	}{
		{httpapi.Config{}, httpapi.ErrConfig}, // no fleet
		{httpapi.Config{Fleet: f.Ctl, Listen: "nope"}, httpapi.ErrConfig},
	} {
		if _, err := httpapi.New(tc.cfg); !errors.Is(err, tc.want) {
			t.Errorf("httpapi.New(%+v): %v, want %v", tc.cfg, err, tc.want)
		}
	}
}

// TestIdempotentRun: a retry with the same key returns the same block and never
// runs the command twice.
func TestIdempotentRun(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	file := filepath.Join(t.TempDir(), "count")
	body := api.RunBody{Command: "echo x >> " + file + "; wc -l < " + file, IdempotencyKey: "deploy-42", TimeoutMS: 10000}
	var a, b api.BlockResult
	f.Must(200, "POST", "/v1/sessions/n1/"+s.ID+"/run", body, &a)
	f.Must(200, "POST", "/v1/sessions/n1/"+s.ID+"/run", body, &b)
	if a.Block.N != b.Block.N || a.Text != "1" || b.Text != "1" {
		t.Fatalf("retry: first %+v, second %+v", a.Block, b.Block)
	}
	data, err := os.ReadFile(file)
	if err != nil || string(data) != "x\n" {
		t.Fatalf("the command ran %q", data)
	}
	body.IdempotencyKey = "deploy-43"
	f.Must(200, "POST", "/v1/sessions/n1/"+s.ID+"/run", body, &b)
	if b.Block.N != a.Block.N+1 || b.Text != "2" {
		t.Fatalf("another key: %+v %q", b.Block, b.Text)
	}
}

// TestFailFast: requests to dead, unserved or unknown nodes fail fast; a request in
// flight to a node that dies is cancelled when gossip says so.
func TestFailFast(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	timed := func(status int, code, method, path string, body any) time.Duration {
		start := time.Now()
		f.APIErr(status, code, method, path, body)
		return time.Since(start)
	}
	// Gossip says alive, but no agent serves it on NATS: no responders, at once.
	f.Ctl.Observe(controller.Member{Name: "ghost", Addr: "127.0.0.1:1", State: api.NodeAlive, Meta: api.NodeMeta{Name: "ghost"}})
	if d := timed(503, api.CodeUnavailable, "GET", "/v1/sessions/ghost/s1", nil); d > 2*time.Second {
		t.Fatalf("no responders took %v", d)
	}
	var nodes api.NodeList
	f.Must(200, "GET", "/v1/nodes", nil, &nodes)
	if st := statusOf(nodes, "ghost"); st != api.NodeSuspect {
		t.Fatalf("ghost after a failed request: %s, want suspect", st)
	}
	// A fleet-wide list leaves it out and says so.
	var list api.SessionList
	f.Must(200, "GET", "/v1/sessions", nil, &list)
	if len(list.Unavailable) != 1 || list.Unavailable[0] != "ghost" {
		t.Fatalf("list: %+v", list)
	}
	// Dead: refused without asking the bus.
	f.Ctl.Observe(controller.Member{Name: "ghost", State: api.NodeDead})
	if d := timed(503, api.CodeUnavailable, "POST", "/v1/sessions/ghost/s1/run", api.RunBody{Command: "true"}); d > 2*time.Second {
		t.Fatalf("dead node took %v", d)
	}
	timed(404, api.CodeNotFound, "GET", "/v1/sessions/nobody/s1", nil)

	// A node that hangs: something serves its run subject but never answers. The
	// request waits until gossip reports the node dead, then fails at once.
	stop, err := f.Bus.Subscribe(api.Subjects{}.RPC("hang", "run"), func(string, map[string]string, []byte) {})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	f.Ctl.Observe(controller.Member{Name: "hang", Addr: "127.0.0.1:2", State: api.NodeAlive, Meta: api.NodeMeta{Name: "hang"}})
	done := make(chan time.Time, 1)
	go func() {
		f.Do("POST", "/v1/sessions/hang/s1/run", api.RunBody{Command: "true", TimeoutMS: 60000})
		done <- time.Now()
	}()
	select {
	case <-done:
		t.Fatal("the request to a hanging node returned before the node was reported dead")
	case <-time.After(300 * time.Millisecond): // the request must still be waiting
	}
	dead := time.Now()
	f.Ctl.Observe(controller.Member{Name: "hang", State: api.NodeDead})
	select {
	case at := <-done:
		if d := at.Sub(dead); d > 2*time.Second {
			t.Fatalf("cancelled %v after the node died", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request to a dead node hangs")
	}
}

func statusOf(l api.NodeList, name string) string {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n.Status
		}
	}
	return ""
}

// TestNodeComesBack: a node that leaves shows as left, and is accepted again when
// it comes back under the same name.
func TestNodeComesBack(t *testing.T) {
	f := newFixture(t, stack.Options{})
	f.Nodes["n2"].Stop()
	f.WaitNodes(api.NodeLeft, "n2")
	f.APIErr(503, api.CodeUnavailable, "POST", "/v1/sessions", api.NewSession{Node: "n2"})
	// New sessions go to the node that is alive.
	for range 3 {
		var s api.Session
		f.Must(201, "POST", "/v1/sessions", api.NewSession{}, &s)
		if s.Node != "n1" {
			t.Fatalf("created on %s", s.Node)
		}
	}
	f.StartNode("n2", map[string]string{"role": "db"})
	f.WaitNodes(api.NodeAlive, "n2")
	s := f.NewSession("n2")
	if br := f.Run("n2", s.ID, "echo back"); br.Text != "back" {
		t.Fatalf("run on the node that came back: %+v", br)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	var h api.Health
	f.Must(200, "GET", "/healthz", nil, &h)
	if h.Status != "ok" || !h.NATS || h.Nodes != 1 {
		t.Fatalf("health: %+v", h)
	}
	s := f.NewSession("n1")
	f.Run("n1", s.ID, "seq 1000")
	f.APIErr(404, api.CodeNotFound, "GET", "/v1/sessions/nope/s1", nil)
	// The node gossips its published bytes every few seconds.
	var m string
	testutil.Eventually(t, 20*time.Second, func() bool {
		_, b := f.Do("GET", "/metrics", nil)
		m = string(b)
		return strings.Contains(m, `fleetmux_node_published_bytes{node="n1"}`) && !strings.Contains(m, `fleetmux_node_published_bytes{node="n1"} 0`)
	}, "published bytes in /metrics")
	for _, want := range []string{
		`fleetmux_http_requests_total{code="200",route="POST /v1/sessions/{node}/{id}/run"} 1`,
		`fleetmux_http_requests_total{code="404",route="GET /v1/sessions/{node}/{id}"} 1`,
		`fleetmux_http_request_duration_seconds_count{route="POST /v1/sessions/{node}/{id}/run"} 1`,
		`fleetmux_nodes{status="alive"} 1`,
		`fleetmux_sessions 1`,
		`fleetmux_node_requests_total{result="ok",verb="run"} 1`,
		`fleetmux_node_request_duration_seconds_bucket{verb="run",le="+Inf"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(m)
	}
}

// TestAudit: every mutating request is audited by the controller (refused ones
// too) and by the node that carried it out.
func TestAudit(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	recs := make(chan api.AuditRecord, 64)
	stop, err := f.Bus.Subscribe(api.Subjects{}.All(api.KindAudit, "*"), func(_ string, _ map[string]string, b []byte) {
		var r api.AuditRecord
		if json.Unmarshal(b, &r) == nil {
			select {
			case recs <- r:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s := f.NewSession("n1")
	f.Do("POST", "/v1/sessions/n1/"+s.ID+"/run", api.RunBody{Command: "echo audited"}, api.HeaderActor, "agent-7")
	f.APIErr(400, api.CodeBadRequest, "POST", "/v1/sessions/n1/"+s.ID+"/run", []byte(`{`))
	want := map[string]bool{"ctl run ok": false, "n1 run ok": false, "ctl run bad_request": false, "n1 create ok": false}
	deadline := time.After(10 * time.Second)
	for {
		done := true
		for _, v := range want {
			done = done && v
		}
		if done {
			break
		}
		select {
		case r := <-recs:
			action := r.Action
			if strings.HasSuffix(action, "/run") {
				action = "run"
			}
			key := fmt.Sprintf("%s %s %s", r.Node, action, r.Result)
			if _, ok := want[key]; ok {
				want[key] = true
			}
			if key == "n1 run ok" && !strings.HasPrefix(r.Actor, "agent-7@127.0.0.1") {
				t.Errorf("node audit actor %q", r.Actor)
			}
		case <-deadline:
			t.Fatalf("audit records missing: %v", want)
		}
	}
}
