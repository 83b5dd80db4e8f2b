package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// readDoc reads a file of the repository (README.md, docs/…).
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeMCPConfig runs the README's MCP configuration as an MCP client would:
// its command and args (the test binary is fleetmux), with its env and nothing
// else, against a fleetmux dev; a tool call must succeed.
func TestReadmeMCPConfig(t *testing.T) {
	m := regexp.MustCompile("(?s)```json\n(\\{\"mcpServers\".*?)\n```").FindStringSubmatch(readDoc(t, "README.md"))
	if m == nil {
		t.Fatal("README.md has no ```json block with an mcpServers configuration")
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(m[1]), &cfg); err != nil {
		t.Fatalf("README.md's MCP configuration is not JSON: %v\n%s", err, m[1])
	}
	srv, ok := cfg.MCPServers["fleetmux"]
	if !ok || srv.Command != "fleetmux" || len(srv.Args) == 0 || srv.Args[0] != "mcp" {
		t.Fatalf("README.md's MCP configuration does not run fleetmux mcp: %s", m[1])
	}
	startDev(t)
	t.Setenv(envToken, "") // an MCP client starts the server with the config's env alone
	t.Setenv(envAddr, "")
	for k, v := range srv.Env {
		t.Setenv(k, v)
	}
	cs, stderr := stdioMCP(t, srv.Args[1:]...)
	text, isErr := callTool(t, cs, "create_session", map[string]any{"title": "readme"}, nil)
	if isErr || !strings.Contains(text, "here/s") {
		t.Fatalf("create_session with the README's MCP configuration: %v %s\nstderr:\n%s", isErr, text, stderr.String())
	}
}

// TestDocsNameRealVerbs: every `fleetmux VERB [SUB]` in README.md and docs/*.md
// written as a command (in inline code, or on a line of a sh or console block) is
// a command of the CLI, so a renamed or removed verb cannot stay documented.
func TestDocsNameRealVerbs(t *testing.T) {
	root := cliRoot()
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "..", "README.md"))
	var bad []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range docCommands(string(b)) {
			words := strings.Fields(cmd)
			c, _, err := root.Find(words[:1])
			if err != nil || c == root {
				bad = append(bad, filepath.Base(f)+": fleetmux "+words[0])
				continue
			}
			// A verb with subcommands that takes no arguments of its own (token,
			// policy, secret, controller, dev): the next word must be one of them.
			if len(words) > 1 && c.HasAvailableSubCommands() && !strings.HasPrefix(words[1], "-") {
				if sub, _, err := c.Find(words[1:2]); (err != nil || sub == c) && c.ValidateArgs(words[1:2]) != nil {
					bad = append(bad, filepath.Base(f)+": fleetmux "+words[0]+" "+words[1])
				}
			}
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Fatalf("the docs name verbs the CLI does not have:\n%s", strings.Join(bad, "\n"))
	}
}

// docCommands finds the fleetmux command lines of a markdown text: "VERB [WORD]"
// of each fleetmux at a command's position (a line's or an inline code span's
// start, after "$ ", an environment assignment, ";", "|", "&&", "(" or "-- ") in
// inline code and in sh, bash and console blocks (console: the "$ " lines).
func docCommands(md string) []string {
	var lines []string
	fence := regexp.MustCompile("(?s)```([a-z]*)\n(.*?)```")
	for _, m := range fence.FindAllStringSubmatch(md, -1) {
		for _, l := range strings.Split(m[2], "\n") {
			switch m[1] {
			case "sh", "bash":
				lines = append(lines, l)
			case "console":
				if strings.HasPrefix(l, "$ ") {
					lines = append(lines, l)
				}
			}
		}
	}
	prose := fence.ReplaceAllString(md, "")
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(prose, -1) {
		lines = append(lines, m[1])
	}
	at := regexp.MustCompile(`(?:^|^\$ |^(?:[A-Z_]+=\S+ )+|; |\| |&& |\(|-- )fleetmux ([a-z][a-z-]*(?: [a-z][a-z-]*)?)`)
	var out []string
	for _, l := range lines {
		for _, part := range strings.Split(l, "\n") {
			for _, m := range at.FindAllStringSubmatch(strings.TrimSpace(part), -1) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// TestDocCommands: what docCommands finds, and what it leaves alone (output,
// other languages, fleetmux as an argument).
func TestDocCommands(t *testing.T) {
	md := "Run `fleetmux dev stop [--data DIR]` or `FLEETMUX_ADDR=x fleetmux mcp`.\n" +
		"```sh\nfleetmux new   # a comment\nclaude mcp add fleetmux -- fleetmux mcp\nx=$(fleetmux run a/b -- ls)\n```\n" +
		"```console\n$ fleetmux token create --name a\nfleetmux dev is up\n```\n" +
		"```\nfleetmux dev is up\n```\n```python\nfrom fleetmux import Client\n```\n"
	got := strings.Join(docCommands(md), ",")
	want := "new,mcp,run a,token create,dev stop,mcp"
	if got != want {
		t.Fatalf("docCommands = %q, want %q", got, want)
	}
}
