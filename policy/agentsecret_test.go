package policy

import "testing"

func TestAgentSecret(t *testing.T) {
	p, err := Parse([]byte(`version: 1
rules:
  - {name: default, action: allow}
secrets:
  - {name: sudo-web, roles: [operator]}
  - {name: key, roles: [admin], principals: ['token:ci*'], nodes: 'web-*', programs: ['agent:claude', sudo]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, node, principal, role, driver string
		want                                bool
	}{
		{"key", "web-1", "token:ci-7", "operator", "claude", true},
		{"key", "web-1", "token:bob", "admin", "claude", true},
		{"key", "web-1", "token:bob", "operator", "claude", false},    // neither role nor principal
		{"key", "db-1", "token:ci-7", "operator", "claude", false},    // another node
		{"key", "web-1", "token:ci-7", "operator", "codex", false},    // another driver
		{"key", "web-1", "token:ci-7", "viewer", "claude", false},     // viewers never
		{"sudo-web", "web-1", "token:x", "operator", "claude", false}, // a sudo secret is for sudo
		{"nope", "web-1", "token:ci-7", "admin", "claude", false},
	} {
		if got := p.AgentSecret(c.name, c.node, c.principal, c.role, c.driver); got != c.want {
			t.Errorf("%+v: %v", c, got)
		}
	}
	if (*Policy)(nil).AgentSecret("key", "web-1", "token:ci-7", "admin", "claude") {
		t.Error("no policy allowed a secret")
	}
}
