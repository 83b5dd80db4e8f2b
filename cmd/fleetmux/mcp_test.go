package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioMCP runs `fleetmux mcp ARGS...` on pipes, as an MCP client runs it as a
// subprocess, and connects the go-sdk's client to it. At the end of the test the
// client leaves and the command must return without an error.
func stdioMCP(t *testing.T, args ...string) (*mcp.ClientSession, *testutil.Buffer) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errb testutil.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := runIO(ctx, append([]string{"mcp"}, args...), inR, outW, &errb)
		outW.Close()
		inR.Close()
		done <- err
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-test", Version: "1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		cancel()
		t.Fatalf("connect: %v; stderr:\n%s", err, errb.String())
	}
	t.Cleanup(func() {
		cs.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("fleetmux mcp: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("fleetmux mcp did not return after the client left; stderr:\n%s", errb.String())
		}
		cancel()
	})
	return cs, &errb
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if out != nil && !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: %v: %s", name, err, raw)
		}
	}
	return b.String(), res.IsError
}

// TestMCPStdio is the README's stdio configuration: `fleetmux mcp` talking to the
// controller of `fleetmux dev`.
func TestMCPStdio(t *testing.T) {
	addr := startDev(t)
	cs, stderr := stdioMCP(t, "--addr", addr)

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != len(api.Tools) {
		t.Fatalf("tools: %v %d", err, len(tools.Tools))
	}
	if got := cs.InitializeResult().ServerInfo.Name; got != "fleetmux" {
		t.Errorf("server name %q", got)
	}

	var s struct{ Node, ID, State string }
	text, isErr := callTool(t, cs, "create_session", map[string]any{"title": "stdio", "description": "driven over stdio"}, &s)
	if isErr || s.Node != "here" || s.ID == "" || s.State != "idle" {
		t.Fatalf("create_session: %v %+v\n%s", isErr, s, text)
	}
	var b struct {
		State    string
		N        int
		ExitCode *int `json:"exit_code"`
	}
	text, isErr = callTool(t, cs, "run_command", map[string]any{"node": s.Node, "session": s.ID, "command": "echo hi; (exit 3)"}, &b)
	if isErr || b.ExitCode == nil || *b.ExitCode != 3 || b.State != "done" || !strings.HasPrefix(text, "[here/"+s.ID+" #1] exit 3 · ") || !regexp.MustCompile(`\n<<<output ([0-9a-f]{18})>>> .*\nhi\n<<<end ([0-9a-f]{18})>>>$`).MatchString(text) {
		t.Fatalf("run_command: %v %+v\n%s", isErr, b, text)
	}
	text, isErr = callTool(t, cs, "run_command", map[string]any{"node": s.Node, "session": s.ID, "command": "read x; echo got-$x"}, &b)
	if isErr || b.State != "waiting_input" || !strings.Contains(text, "send_input") {
		t.Fatalf("run_command read: %v %+v\n%s", isErr, b, text)
	}
	callTool(t, cs, "send_input", map[string]any{"node": s.Node, "session": s.ID, "text": "abc", "enter": true}, nil)
	text, isErr = callTool(t, cs, "wait_for", map[string]any{"node": s.Node, "session": s.ID, "timeout_ms": 20000}, &b)
	if isErr || b.State != "done" || !strings.Contains(text, "got-abc") {
		t.Fatalf("wait_for: %v %+v\n%s", isErr, b, text)
	}
	text, isErr = callTool(t, cs, "fanout_run", map[string]any{"all": true, "command": "echo fan"}, nil)
	if isErr || !strings.Contains(text, "ok=1 failed=0") || !strings.Contains(text, "\nhere/") {
		t.Fatalf("fanout_run: %v\n%s", isErr, text)
	}
	text, isErr = callTool(t, cs, "run_command", map[string]any{"node": "nowhere", "session": "s1", "command": "true"}, nil)
	if !isErr || !strings.Contains(text, `unknown node "nowhere"`) {
		t.Fatalf("unknown node: %v %s", isErr, text)
	}
	text, isErr = callTool(t, cs, "close_session", map[string]any{"node": s.Node, "session": s.ID}, nil)
	if isErr || !strings.HasPrefix(text, "closed here/"+s.ID) {
		t.Fatalf("close_session: %v %s", isErr, text)
	}
	// `fleetmux dev` serves the same tools at /mcp, over streamable HTTP.
	hs, err := mcp.NewClient(&mcp.Implementation{Name: "http-test", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: addr + "/mcp", MaxRetries: -1, HTTPClient: &http.Client{Transport: bearer(devAdminToken)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	text, isErr = callTool(t, hs, "list_sessions", map[string]any{}, nil)
	hs.Close()
	if isErr || !strings.HasPrefix(text, "no sessions") {
		t.Errorf("list_sessions over /mcp: %v %s", isErr, text)
	}
	if e := stderr.String(); strings.Contains(e, "level=ERROR") {
		t.Errorf("stderr:\n%s", e)
	}
}

// TestMCPStdioNoController: without a controller the server still starts, and the
// tools say what is wrong.
func TestMCPStdioNoController(t *testing.T) {
	cs, stderr := stdioMCP(t, "--addr", "http://127.0.0.1:1")
	text, isErr := callTool(t, cs, "list_nodes", map[string]any{}, nil)
	if !isErr || !strings.Contains(text, "no controller at http://127.0.0.1:1 (connection refused)") || !strings.Contains(text, "fleetmux dev") {
		t.Fatalf("list_nodes without a controller: %v %s", isErr, text)
	}
	if !strings.Contains(stderr.String(), "does not answer") {
		t.Errorf("no warning on stderr: %q", stderr.String())
	}
	_, _, err := runArgs(t, "mcp", "--addr", "ftp://x")
	if exitCode(err) != 2 {
		t.Errorf("bad --addr: %v", err)
	}
}

// bearer is a transport that sends an API token.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPConfigAsWritten: the README's MCP configurations, as an MCP client runs
// them: `fleetmux mcp` with no flags and no environment, and with FLEETMUX_ADDR set
// to dev's address (also spelled localhost, with a trailing slash). Each finds dev's
// token in dev.json, and a tool call succeeds.
func TestMCPConfigAsWritten(t *testing.T) {
	addr := startDev(t)
	t.Setenv(envToken, "")
	port := addr[strings.LastIndex(addr, ":")+1:]
	for _, env := range []string{"", addr, "http://localhost:" + port + "/"} {
		t.Run("FLEETMUX_ADDR="+env, func(t *testing.T) {
			t.Setenv(envAddr, env)
			cs, stderr := stdioMCP(t)
			text, isErr := callTool(t, cs, "create_session", map[string]any{"title": "config"}, nil)
			if isErr || !strings.Contains(text, "here/s") {
				t.Fatalf("create_session: %v %s\nstderr:\n%s", isErr, text, stderr.String())
			}
		})
	}
	// The CLI alike: --addr naming dev does not turn dev's token off; token create
	// (admin) works with it.
	t.Setenv(envAddr, "")
	out, errs, err := runArgs(t, "token", "create", "--addr", "localhost:"+port, "--name", "agent", "--role", "operator")
	if err != nil || !strings.HasPrefix(out, "fmx1.agent.") {
		t.Fatalf("token create --addr dev: %q %q %v", out, errs, err)
	}
}
