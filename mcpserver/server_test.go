package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The server over a fake Fleet, driven by the SDK's own client: what results,
// tool errors, audit records and actors look like, in milliseconds. The real
// stack (a controller, node agents, bash) drives it in controller/mcp_test.go
// (in-process and at /mcp) and cmd/fleetmux/mcp_test.go (`fleetmux mcp`).

// fake is a Fleet with one node (n1) and one idle session (n1/s1). Every call
// records the actor its context carries (Options.WithActor puts it there); err,
// when set, fails every call.
type fake struct {
	mu     sync.Mutex
	err    error
	run    api.BlockResult // Run's reply
	runErr error           // Run's error, when set (a held command)
	appr   api.Approval    // Approval's reply
	scr    *api.Screen     // Screen's reply, when set
	body   api.RunBody     // Run's last body
	actors []string        // one per call
	calls  []string        // method names, in order
}

type fakeActor struct{}

func withFakeActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, fakeActor{}, actor)
}

func (f *fake) called(ctx context.Context, method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, _ := ctx.Value(fakeActor{}).(string)
	f.actors = append(f.actors, a)
	f.calls = append(f.calls, method)
	return f.err
}

func (f *fake) idle() api.Session {
	return api.Session{Node: "n1", ID: "s1", State: api.StateIdle, Cwd: "/tmp", Title: "build"}
}

func (f *fake) Nodes(ctx context.Context) (api.NodeList, error) {
	if err := f.called(ctx, "Nodes"); err != nil {
		return api.NodeList{}, err
	}
	return api.NodeList{Nodes: []api.Node{{Name: "n1", Status: api.NodeAlive, Sessions: 1, Labels: map[string]string{"role": "web"}}}}, nil
}

func (f *fake) Sessions(ctx context.Context, q api.SessionFilter) (api.SessionList, error) {
	if err := f.called(ctx, "Sessions"); err != nil {
		return api.SessionList{}, err
	}
	return api.SessionList{Sessions: []api.Session{f.idle()}}, nil
}

func (f *fake) NewSession(ctx context.Context, req api.NewSession) (api.Session, error) {
	if err := f.called(ctx, "NewSession"); err != nil {
		return api.Session{}, err
	}
	return f.idle(), nil
}

func (f *fake) Session(ctx context.Context, node, id string) (api.Session, error) {
	if err := f.called(ctx, "Session"); err != nil {
		return api.Session{}, err
	}
	return f.idle(), nil
}

func (f *fake) UpdateSession(ctx context.Context, node, id string, p api.SessionPatch) (api.Session, error) {
	if err := f.called(ctx, "UpdateSession"); err != nil {
		return api.Session{}, err
	}
	return f.idle(), nil
}

func (f *fake) CloseSession(ctx context.Context, node, id string) (api.Session, error) {
	if err := f.called(ctx, "CloseSession"); err != nil {
		return api.Session{}, err
	}
	s := f.idle()
	s.State = api.StateExited
	return s, nil
}

func (f *fake) Run(ctx context.Context, node, id string, body api.RunBody) (api.BlockResult, error) {
	if err := f.called(ctx, "Run"); err != nil {
		return api.BlockResult{}, err
	}
	f.mu.Lock()
	f.body = body
	f.mu.Unlock()
	return f.run, f.runErr
}

func (f *fake) Approval(ctx context.Context, node, id string, waitMS int) (api.Approval, error) {
	if err := f.called(ctx, "Approval"); err != nil {
		return api.Approval{}, err
	}
	return f.appr, nil
}

func (f *fake) Input(ctx context.Context, node, id, data string) error {
	return f.called(ctx, "Input")
}

func (f *fake) Keys(ctx context.Context, node, id string, keys ...string) error {
	return f.called(ctx, "Keys")
}

func (f *fake) Screen(ctx context.Context, node, id string) (api.Screen, error) {
	if err := f.called(ctx, "Screen"); err != nil {
		return api.Screen{}, err
	}
	if f.scr != nil {
		return *f.scr, nil
	}
	return api.Screen{Text: "$ ", Cols: 80, Rows: 24, Echo: true}, nil
}

func (f *fake) Block(ctx context.Context, node, id string, n int, q api.BlockQuery) (api.BlockResult, error) {
	if err := f.called(ctx, "Block"); err != nil {
		return api.BlockResult{}, err
	}
	return f.run, nil
}

// Wait answers at once, except for waiting_input, which never comes: it waits for
// ctx (as a node's wait does until its timeout).
func (f *fake) Wait(ctx context.Context, node, id string, q api.WaitQuery) (api.WaitResult, error) {
	if q.Until == api.UntilWaitingInput {
		<-ctx.Done()
		return api.WaitResult{}, ctx.Err()
	}
	if err := f.called(ctx, "Wait"); err != nil {
		return api.WaitResult{}, err
	}
	return api.WaitResult{OK: true, BlockResult: api.BlockResult{Session: f.idle()}}, nil
}

func (f *fake) Fanout(ctx context.Context, req api.FanoutRequest) (api.Fanout, error) {
	if err := f.called(ctx, "Fanout"); err != nil {
		return api.Fanout{}, err
	}
	return api.Fanout{}, nil
}

var _ Fleet = (*fake)(nil)

// client is an MCP client session of the test, named "test-agent".
type client struct {
	t  *testing.T
	cs *mcp.ClientSession
}

// serve serves the server over f on the in-memory transport and connects a
// client; at the end the client leaves and Serve must return nil.
func serve(t *testing.T, f Fleet, opts Options) *client {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, f, opts, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after the client left")
		}
		cancel()
	})
	return &client{t: t, cs: cs}
}

// call calls a tool: its text, whether it is a tool error, and its structured
// content decoded into out (when non-nil).
func (c *client) call(name string, args map[string]any, out any) (string, bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		c.t.Fatalf("%s: protocol error: %v", name, err)
	}
	var b strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if out != nil && !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s: structured content %s: %v", name, raw, err)
		}
	}
	return b.String(), res.IsError
}

func TestTools(t *testing.T) {
	c := serve(t, &fake{}, Options{})
	tools, err := c.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]*mcp.Tool{}
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		byName[tl.Name] = tl
	}
	slices.Sort(names)
	want := []string{"catch_up", "close_session", "create_session", "exec", "fanout_run", "interrupt_agent", "kill_agent", "list_agents", "list_nodes", "list_sessions",
		"read_agent_output", "read_block", "read_screen", "run_command", "send_input", "send_keys", "send_to_agent", "set_session_info", "spawn_agent",
		"wait_for", "wait_for_agent"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	schema, _ := json.Marshal(byName["wait_for"].InputSchema)
	enum := `"enum":["` + strings.Join([]string{api.UntilIdle, api.UntilWaitingInput, api.UntilExited, api.UntilOutput}, `","`) + `"]`
	if !strings.Contains(string(schema), enum) {
		t.Errorf("wait_for schema %s: want %s", schema, enum)
	}
	if got := c.cs.InitializeResult().ServerInfo.Version; got != "dev" {
		t.Errorf("default version %q", got)
	}
}

// TestRunCommand: the result's header, text and structured content; the audit
// record and every Fleet call carry the actor.
func TestRunCommand(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	end := start.Add(1240 * time.Millisecond)
	three := 3
	f := &fake{run: api.BlockResult{
		Block:   api.Block{N: 1, Command: "echo hi; (exit 3)", Cwd: "/tmp", State: api.BlockDone, ExitCode: &three, StartedAt: start, FinishedAt: &end},
		Text:    "hi\n",
		Session: api.Session{Node: "n1", ID: "s1", State: api.StateIdle, Blocks: 1},
	}}
	var mu sync.Mutex
	var audits []api.AuditRecord
	c := serve(t, f, Options{WithActor: withFakeActor, Audit: func(_ context.Context, rec api.AuditRecord) {
		mu.Lock()
		defer mu.Unlock()
		audits = append(audits, rec)
	}})
	var b Block
	text, isErr := c.call("run_command", map[string]any{"node": "n1", "session": "s1", "command": "echo hi; (exit 3)"}, &b)
	if isErr || unfence(text) != "[n1/s1 #1] exit 3 · 1.24s · cwd /tmp · session idle · $ echo hi; (exit 3)\n<<<output>>>\nhi\n<<<end>>>" {
		t.Fatalf("run_command: %v\n%s", isErr, text)
	}
	if b.State != api.BlockDone || b.ExitCode == nil || *b.ExitCode != 3 || b.DurationMS != 1240 || b.N != 1 || b.SessionState != api.StateIdle {
		t.Errorf("structured content %+v", b)
	}
	f.mu.Lock()
	calls, actors := slices.Clone(f.calls), slices.Clone(f.actors)
	f.mu.Unlock()
	if !slices.Contains(calls, "Run") {
		t.Errorf("calls %v: no Run", calls)
	}
	for i, a := range actors {
		if a != "mcp:test-agent" {
			t.Errorf("%s acted as %q, want mcp:test-agent", calls[i], a)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(audits) != 1 || audits[0].Actor != "mcp:test-agent" || audits[0].Action != "mcp run_command" || audits[0].Session != "n1/s1" ||
		audits[0].Detail != "echo hi; (exit 3)" || audits[0].Result != "ok" {
		t.Errorf("audit %+v", audits)
	}

	// A read-only tool is not audited.
	c.call("list_sessions", map[string]any{}, nil)
	if len(audits) != 1 {
		t.Errorf("list_sessions was audited: %+v", audits[1:])
	}
}

// TestFleetErrors: what a model reads when the Fleet fails, and the code the
// audit records.
func TestFleetErrors(t *testing.T) {
	refused := errors.New(`Post "http://127.0.0.1:1/v1/sessions/n1/s1/run": dial tcp 127.0.0.1:1: connect: connection refused`)
	tests := []struct {
		name        string
		err         error
		unreachable func(error) string
		want        []string
		code        string
	}{
		{"unknown node", api.Errorf(api.CodeNotFound, "unknown node %q", "n1"), nil, []string{`unknown node "n1": call list_nodes`}, api.CodeNotFound},
		{"no session", api.Errorf(api.CodeNotFound, "no session s1"), nil, []string{"no session n1/s1: call list_sessions"}, api.CodeNotFound},
		{"busy", api.Errorf(api.CodeBusy, "a command is running (block 4)"), nil, []string{"a command is running in n1/s1 and is not waiting for input (block 4)", "wait_for", `["C-c"]`}, api.CodeBusy},
		{"lease", api.Errorf(api.CodeBusy, "session n1/s1 is held by ssh:SHA256:x, who is typing in an attach; retry once they stop"), nil,
			[]string{"another writer has n1/s1", "ssh:SHA256:x, who is typing", "wait_for"}, api.CodeBusy},
		{"exited", api.Errorf(api.CodeExited, "it exited"), nil, []string{"the session n1/s1 has exited", "create_session"}, api.CodeExited},
		{"denied", api.Errorf(api.CodeForbidden, "rule no-rm"), nil, []string{"refused by the controller: rule no-rm"}, api.CodeForbidden},
		{"not an api error", refused, nil, []string{"internal error: Post "}, api.CodeInternal},
		{"unreachable", refused, func(err error) string { return "no controller at http://127.0.0.1:1 (connection refused)" },
			[]string{"unavailable: no controller at http://127.0.0.1:1 (connection refused)"}, api.CodeUnavailable},
		{"cancelled", context.Canceled, func(error) string { t.Error("Unreachable called for a cancellation"); return "" },
			[]string{"cancelled"}, api.CodeTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var rec api.AuditRecord
			c := serve(t, &fake{err: tt.err}, Options{Unreachable: tt.unreachable, Audit: func(_ context.Context, r api.AuditRecord) {
				mu.Lock()
				defer mu.Unlock()
				rec = r
			}})
			text, isErr := c.call("close_session", map[string]any{"node": "n1", "session": "s1"}, nil)
			if !isErr {
				t.Fatalf("no tool error: %s", text)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("error %q, want it to contain %q", text, w)
				}
			}
			if rec.Result != tt.code || rec.Error != text {
				t.Errorf("audit %+v, want result %q", rec, tt.code)
			}
		})
	}
}

// TestBadArguments: refused before the Fleet is called, with what to do instead.
func TestBadArguments(t *testing.T) {
	f := &fake{}
	c := serve(t, f, Options{})
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_command", map[string]any{"node": "n1", "session": "s1", "command": " "}, "command is empty"},
		{"run_command", map[string]any{"node": "", "session": "s1", "command": "true"}, "node is required"},
		{"run_command", map[string]any{"node": "n1", "session": "n1/s1", "command": "true"}, `pass the id alone, e.g. "s1"`},
		{"run_command", map[string]any{"node": "a.b", "session": "s1", "command": "true"}, `bad node "a.b"`},
		{"run_command", map[string]any{"node": "n1", "session": "s1", "command": "true", "timeout_ms": 3600000}, "over the limit of 600000 (10 minutes)"},
		{"run_command", map[string]any{"node": "n1", "session": "s1", "command": "true", "sesion": "x"}, "sesion"},
		{"wait_for", map[string]any{"node": "n1", "session": "s1", "until": "done"}, "until"},
		{"send_input", map[string]any{"node": "n1", "session": "s1"}, "nothing to send"},
		{"send_keys", map[string]any{"node": "n1", "session": "s1", "keys": []string{}}, "keys is empty"},
		{"set_session_info", map[string]any{"node": "n1", "session": "s1"}, "nothing to change"},
		{"fanout_run", map[string]any{"command": "true"}, "no targets"},
		{"fanout_run", map[string]any{"command": "true", "all": true, "sessions": []string{"n1/s1"}}, "sessions excludes all"},
		{"fanout_run", map[string]any{"command": "true", "sessions": []string{"n1"}}, "want NODE/SESSION"},
		{"list_sessions", map[string]any{"node": "a b"}, `bad node "a b"`},
	}
	for _, tt := range tests {
		text, isErr := c.call(tt.tool, tt.args, nil)
		if !isErr || !strings.Contains(text, tt.want) {
			t.Errorf("%s %v: isError %v, %q; want an error containing %q", tt.tool, tt.args, isErr, text, tt.want)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) > 0 {
		t.Errorf("bad arguments reached the Fleet: %v", f.calls)
	}
}

// header adds a header to every request.
type header struct{ k, v string }

func (h header) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.k, h.v)
	return http.DefaultTransport.RoundTrip(r)
}

// TestHandler: over HTTP the actor names the client's address, which a client
// cannot forge with the header that carries it; Closing refuses new sessions.
func TestHandler(t *testing.T) {
	var mu sync.Mutex
	var actors []string
	closing := false
	m := New(&fake{}, Options{Audit: func(_ context.Context, rec api.AuditRecord) {
		mu.Lock()
		defer mu.Unlock()
		actors = append(actors, rec.Actor)
	}})
	hs := httptest.NewServer(m.Handler(HTTPOptions{Closing: func() bool {
		mu.Lock()
		defer mu.Unlock()
		return closing
	}}))
	defer hs.Close()
	defer m.Close()
	defer m.CloseSessions()

	connect := func() (*mcp.ClientSession, error) {
		tr := &mcp.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1,
			HTTPClient: &http.Client{Transport: header{remoteHeader, "203.0.113.9"}}}
		return mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	}
	cs, err := connect()
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, cs: cs}
	if text, isErr := c.call("send_keys", map[string]any{"node": "n1", "session": "s1", "keys": []string{"C-c"}}, nil); isErr {
		t.Fatal(text)
	}
	cs.Close()
	mu.Lock()
	if len(actors) != 1 || actors[0] != "mcp:test-agent@127.0.0.1" {
		t.Errorf("actors %q, want [mcp:test-agent@127.0.0.1]", actors)
	}
	closing = true
	mu.Unlock()
	if cs, err := connect(); err == nil {
		cs.Close()
		t.Errorf("a new session while closing was accepted")
	}
}

// TestResources: the sessions listed as resources, a screen read, and a bad URI
// refused as not found.
func TestResources(t *testing.T) {
	c := serve(t, &fake{}, Options{})
	ctx := context.Background()
	res, err := c.cs.ListResources(ctx, nil)
	if err != nil || len(res.Resources) != 1 || res.Resources[0].URI != "fleetmux://n1/s1/screen" {
		t.Fatalf("resources: %v %+v", err, res)
	}
	rr, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fleetmux://n1/s1/screen"})
	if err != nil || len(rr.Contents) != 1 || !regexp.MustCompile(`^\[n1/s1\] screen 80x24 · cursor row 0 col 0\n<<<screen>>>\n\$\n<<<end>>>$`).MatchString(unfence(rr.Contents[0].Text)) {
		t.Fatalf("screen: %v %+v", err, rr)
	}
	if _, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fleetmux://n1/s1/blocks/0"}); err == nil {
		t.Errorf("block 0 was read")
	}
}
