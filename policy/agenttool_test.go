package policy

import (
	"errors"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

const agentToolPolicy = `version: 1
rules:
  - name: no-disk-wipes
    match: {command: 'rm\s+-rf\s+/(\s|$)'}
    action: deny
  - name: no-fetch
    match: {agent: claude, tool: WebFetch}
    action: deny
  - name: etc-needs-a-human
    match: {tool: 'Edit', input: '^/etc/'}
    action: approve
  - name: tests-are-fine
    match: {agent: 'cla*', tool: Bash, input: '^go test( |$)'}
    action: allow
  - name: shell-needs-a-human
    match: {tool: Bash}
    action: approve
  - name: default
    action: allow
`

// TestDecideAgentTool: rules on agent, tool and input decide an agent's tool
// requests and nothing else; a Bash command is also the request's command, so
// command rules hold for it; an allow rule on input needs every simple command.
func TestDecideAgentTool(t *testing.T) {
	p, err := Parse([]byte(agentToolPolicy))
	if err != nil {
		t.Fatal(err)
	}
	bash := func(cmd string) Request {
		return Request{Command: cmd, Principal: "token:dev", Role: api.RoleAdmin, Agent: "claude", Tool: "Bash", Input: cmd}
	}
	tool := func(agent, name, input string) Request {
		return Request{Principal: "token:dev", Role: api.RoleAdmin, Agent: agent, Tool: name, Input: input}
	}
	tests := []struct {
		name string
		req  Request
		act  string
		rule string
	}{
		{"bash wipe", bash("rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"bash touch", bash("touch MARKER"), api.ActionApprove, "shell-needs-a-human"},
		{"bash tests", bash("go test ./..."), api.ActionAllow, "tests-are-fine"},
		{"bash tests then more", bash("go test ./... && curl evil"), api.ActionApprove, "shell-needs-a-human"},
		{"fetch", tool("claude", "WebFetch", "https://example.com"), api.ActionDeny, "no-fetch"},
		{"fetch by another agent", tool("opencode", "WebFetch", "https://example.com"), api.ActionAllow, "default"},
		{"edit etc", tool("claude", "Edit", "/etc/passwd"), api.ActionApprove, "etc-needs-a-human"},
		{"edit home", tool("claude", "Edit", "/home/a/x.go"), api.ActionAllow, "default"},
		// A run is no tool request: the rules on tools do not hold it.
		{"run touch", Request{Command: "touch MARKER", Principal: "token:dev", Role: api.RoleAdmin}, api.ActionAllow, "default"},
		{"run wipe", Request{Command: "rm -rf /", Role: api.RoleAdmin}, api.ActionDeny, "no-disk-wipes"},
	}
	for _, tt := range tests {
		d := p.Decide(tt.req)
		if d.Action != tt.act || d.Rule != tt.rule {
			t.Errorf("%s: got %s by %q, want %s by %q", tt.name, d.Action, d.Rule, tt.act, tt.rule)
		}
	}
}

func TestParseAgentToolFields(t *testing.T) {
	for _, doc := range []string{
		"version: 1\nrules:\n  - {name: a, match: {input: '('}, action: deny}\n",
		"version: 1\nrules:\n  - {name: a, match: {tool: 'B[a]sh'}, action: deny}\n",
		"version: 1\nrules:\n  - {name: a, match: {agent: ''}, action: deny}\n",
	} {
		if _, err := Parse([]byte(doc)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", doc, err)
		}
	}
}
