package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// inspectorVersion is the MCP inspector TestMCPInspectorStrict runs (npm
// @modelcontextprotocol/inspector, pinned).
const inspectorVersion = "2.12.0"

// TestMCPInspectorStrict runs the MCP inspector's CLI, as a user checking an MCP
// server would, on `fleetmux mcp`: tools/list under --strict reports every
// tool-schema portability problem (nullable type arrays were 24 of them) on
// stderr. It must report none and list the tools. tools/list needs no
// controller, so `fleetmux mcp` is pointed at none. An npx that cannot reach
// its registry ends the test as Missing (a failure under FLEETMUX_TEST_STRICT=1).
// mcpserver's TestSchemasStrict is the same check without node.
func TestMCPInspectorStrict(t *testing.T) {
	testutil.NeedTool(t, "node")
	npx := testutil.NeedTool(t, "npx")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The inspector starts the server with a minimal environment: -e makes this
	// test binary fleetmux (TestMain).
	cmd := exec.CommandContext(ctx, npx, "-y", "@modelcontextprotocol/inspector@"+inspectorVersion,
		"--cli", "-e", envTestMain+"=1", self, "mcp", "--addr", "http://127.0.0.1:1",
		"--method", "tools/list", "--strict")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false",
		"npm_config_fetch_retries=1", "npm_config_fetch_retry_mintimeout=1000", "npm_config_fetch_retry_maxtimeout=2000")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if err != nil {
		for _, unreachable := range []string{"ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH", "EHOSTUNREACH"} {
			if bytes.Contains(errb.Bytes(), []byte("npm error")) && bytes.Contains(errb.Bytes(), []byte(unreachable)) {
				testutil.Missing(t, "the npm registry for the MCP inspector (npx: %s)", unreachable)
			}
		}
		t.Fatalf("inspector: %v\nstderr:\n%s\nstdout:\n%s", err, errb.String(), out.String())
	}
	// --strict prints each problem as `Warning: tool "NAME"` or `Error: tool
	// "NAME"` with its path, and a count line "N errors, M warnings across ...".
	if problems := regexp.MustCompile(`(?m)^(Warning|Error): tool "|[1-9][0-9]* (errors|warnings) across`).FindAll(errb.Bytes(), -1); len(problems) > 0 {
		t.Errorf("the inspector reports %d schema problems:\n%s", len(problems), errb.String())
	}
	var list struct {
		Tools []struct {
			Name         string         `json:"name"`
			InputSchema  map[string]any `json:"inputSchema"`
			OutputSchema map[string]any `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil || len(list.Tools) != len(api.Tools) {
		t.Fatalf("tools/list: %v, %d tools:\n%s\nstderr:\n%s", err, len(list.Tools), out.String(), errb.String())
	}
	t.Logf("tools/list through the inspector: %d tools, %d bytes (indented)", len(list.Tools), out.Len())
}
