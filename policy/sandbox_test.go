package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

const sandboxDoc = `version: 1
sandboxes:
  profiles:
    workonly:
      files: {write: [/srv/work], hide: [/root, /home]}
      network: none
      limits: {memory: 256MiB, pids: 64, cpu: 0.5}
    tight:
      files: {write: [/srv/work/sub], hide: [/root, /home, /var]}
      network: none
      limits: {memory: 64MiB, pids: 16, cpu: 0.25}
    web:
      files: {write: [/tmp]}
      network: {connect_tcp: [443, 5432]}
    open:
      network: full
  rules:
    - match: {principal: 'token:ci*'}
      profile: workonly
    - match: {agent: '*'}
      profile: web
    - match: {node_labels: {env: prod}, role: operator}
      profile: tight
  default: none
`

func TestSandboxParse(t *testing.T) {
	p, err := Parse([]byte(sandboxDoc))
	if err != nil {
		t.Fatal(err)
	}
	w := p.Sandboxes.Profiles["workonly"]
	if w == nil || w.Limits != (api.SandboxLimits{MemoryBytes: 256 << 20, Pids: 64, CPU: 0.5}) ||
		w.Network.Mode != api.NetworkNone || len(w.Files.Write) != 1 || len(w.Files.Hide) != 2 {
		t.Fatalf("workonly: %+v", w)
	}
	if web := p.Sandboxes.Profiles["web"]; web.Network.Mode != api.NetworkTCP || len(web.Network.Ports) != 2 {
		t.Fatalf("web: %+v", web)
	}
	if p.Sandboxes.Default != "" || len(p.Sandboxes.Rules) != 3 {
		t.Fatalf("%+v", p.Sandboxes)
	}
}

func TestSandboxChoose(t *testing.T) {
	p, err := Parse([]byte(sandboxDoc))
	if err != nil {
		t.Fatal(err)
	}
	prod := map[string]string{"env": "prod"}
	for _, c := range []struct {
		name  string
		req   Request
		asked string
		want  string // profile name, "" for none
		err   error
	}{
		{"ci token", Request{Principal: "token:ci-7"}, "", "workonly", nil},
		{"agent", Request{Principal: "token:bob", Agent: "claude"}, "", "web", nil},
		{"prod operator", Request{Principal: "token:bob", Role: api.RoleOperator, NodeLabels: prod}, "", "tight", nil},
		{"prod admin", Request{Principal: "token:bob", Role: api.RoleAdmin, NodeLabels: prod}, "", "", nil},
		{"nobody", Request{Principal: "token:bob"}, "", "", nil},
		{"ask stricter", Request{Principal: "token:ci-7"}, "tight", "tight", nil},
		{"ask same", Request{Principal: "token:ci-7"}, "workonly", "workonly", nil},
		{"ask looser network", Request{Principal: "token:ci-7"}, "web", "", ErrLooser},
		{"ask looser open", Request{Principal: "token:ci-7"}, "open", "", ErrLooser},
		{"ask none under a choice", Request{Principal: "token:ci-7"}, "none", "", ErrUnknownProfile},
		{"ask any with no choice", Request{Principal: "token:bob"}, "open", "open", nil},
		{"ask none with no choice", Request{Principal: "token:bob"}, "none", "", nil},
		{"ask unknown", Request{Principal: "token:bob"}, "nope", "", ErrUnknownProfile},
		{"looser limits", Request{Principal: "token:bob", Role: api.RoleOperator, NodeLabels: prod}, "workonly", "", ErrLooser},
	} {
		got, err := p.Sandbox(c.req, c.asked)
		if !errors.Is(err, c.err) || c.err == nil && err != nil {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
			continue
		}
		name := ""
		if got != nil {
			name = got.Name
		}
		if name != c.want {
			t.Errorf("%s: profile %q, want %q", c.name, name, c.want)
		}
	}
	var nilPol *Policy
	if got, err := nilPol.Sandbox(Request{}, ""); got != nil || err != nil {
		t.Fatalf("nil policy: %v %v", got, err)
	}
	if _, err := nilPol.Sandbox(Request{}, "x"); !errors.Is(err, ErrUnknownProfile) {
		t.Fatalf("nil policy asked x: %v", err)
	}
}

func TestSandboxParseErrors(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"sandboxes: {profiles: {a: {files: {write: [rel]}}}}", "not absolute"},
		{"sandboxes: {profiles: {a: {files: {write: [/a/../b]}}}}", "not absolute"},
		{"sandboxes: {profiles: {a: {network: tcp}}}", "tcp takes ports"},
		{"sandboxes: {profiles: {a: {network: wifi}}}", "network"},
		{"sandboxes: {profiles: {a: {network: {connect_tcp: [70000]}}}}", "bad port"},
		{"sandboxes: {profiles: {a: {limits: {memory: 12XB}}}}", "bad value"},
		{"sandboxes: {profiles: {a: {limits: {pids: -1}}}}", "negative"},
		{"sandboxes: {profiles: {a: {files: {rest: maybe}}}}", "rest"},
		{"sandboxes: {profiles: {none: {}}}", "means no profile"},
		{"sandboxes: {profiles: {a: {}}, rules: [{match: {principal: x}, profile: b}]}", `no profile "b"`},
		{"sandboxes: {profiles: {a: {}}, default: b}", `no profile "b"`},
		{"sandboxes: {profiles: {a: {}}, rules: [{match: {command: rm}, profile: a}]}", "unknown field"},
		{"sandboxes: {profiles: {a: {}}, rules: [{match: {principal: x}}]}", "missing"},
		{"sandboxes: {profiles: {a: {colour: red}}}", "unknown field"},
	} {
		_, err := Parse([]byte("version: 1\n" + c.doc))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.doc, err, c.want)
		}
	}
}

// TestSandboxAgentDefault: with agent_default, an agent's session that no rule
// fits gets that profile, any other session the default; a rule that fits
// still decides; agent_default names a known profile or none.
func TestSandboxAgentDefault(t *testing.T) {
	doc := `version: 1
sandboxes:
  profiles:
    agentbox:
      files: {write: [/srv/agents]}
      network: {connect_tcp: [443]}
    workonly:
      files: {write: [/srv/work]}
  rules:
    - match: {principal: 'token:ci*'}
      profile: workonly
  default: none
  agent_default: agentbox
`
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  Request
		want string
	}{
		{Request{Principal: "token:bob", Agent: "claude"}, "agentbox"},
		{Request{Principal: "token:bob"}, ""},
		{Request{Principal: "token:ci-1", Agent: "claude"}, "workonly"},
	} {
		got, err := p.Sandbox(c.req, "")
		if err != nil || (got == nil) != (c.want == "") || got != nil && got.Name != c.want {
			t.Errorf("%+v: %+v %v, want %q", c.req, got, err, c.want)
		}
	}
	if _, err := Parse([]byte(strings.Replace(doc, "agent_default: agentbox", "agent_default: nope", 1))); err == nil || !strings.Contains(err.Error(), "agent_default") {
		t.Errorf("an unknown agent_default: %v", err)
	}
	p, err = Parse([]byte(strings.Replace(doc, "agent_default: agentbox", "agent_default: none", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Sandbox(Request{Principal: "token:bob", Agent: "claude"}, ""); got != nil || err != nil {
		t.Errorf("agent_default none: %+v %v", got, err)
	}
}
