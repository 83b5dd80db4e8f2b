package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// designExample is DESIGN.md's example policy.
const designExample = `version: 1
rules:
  - name: no-disk-wipes
    match: {command: '(^|[;&|]\s*)(rm\s+-[a-z]*r[a-z]*f?\s+/(\s|$)|mkfs|dd\s.*of=/dev/)'}
    action: deny
  - name: prod-needs-a-human
    match: {node_labels: {env: prod}, actor: 'mcp:*'}
    action: approve
    approve_within: 10m
  - name: default
    action: allow
redact:
  - {name: aws-key, pattern: 'AKIA[0-9A-Z]{16}'}
  - {name: private-key, pattern: '-----BEGIN [A-Z ]*PRIVATE KEY-----'}
`

func TestParseDesignExample(t *testing.T) {
	p, err := Parse([]byte(designExample))
	if err != nil {
		t.Fatal(err)
	}
	if p.Format != 1 || p.Version != 0 || len(p.Rules) != 3 || len(p.Redacts) != 2 {
		t.Fatalf("got format %d version %d, %d rules, %d redacts", p.Format, p.Version, len(p.Rules), len(p.Redacts))
	}
	r := p.Rules[1]
	if r.Name != "prod-needs-a-human" || r.Action != api.ActionApprove || r.ApproveWithin != 10*time.Minute ||
		r.Match.Actor != "mcp:*" || r.Match.NodeLabels["env"] != "prod" || r.Line != 6 {
		t.Fatalf("rule 1 = %+v", r)
	}
	if p.Rules[0].ApproveWithin != 0 {
		t.Fatalf("a deny rule has approve_within %v", p.Rules[0].ApproveWithin)
	}
}

func TestParseJSON(t *testing.T) {
	doc := `{"version": 1, "rules": [{"name": "x", "match": {"command": "^rm", "role": "viewer"}, "action": "approve"}],
	"redact": [{"name": "k", "pattern": "sk-[a-z]{8}"}]}`
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if p.Rules[0].ApproveWithin != DefaultApproveWithin || p.Rules[0].Match.Role != api.RoleViewer {
		t.Fatalf("rule = %+v", p.Rules[0])
	}
}

func TestParseErrors(t *testing.T) {
	rule := func(body string) string { return "version: 1\nrules:\n  - name: r\n" + body }
	tests := []struct {
		name, doc string
		want      string // the whole message
	}{
		{"empty", "", "the document is empty"},
		{"not yaml", "version: [1", "not YAML or JSON"},
		{"two docs", "version: 1\n---\nversion: 1\n", "line 2: more than one document"},
		{"no version", "rules: []\n", "line 1: version: missing (want version: 1)"},
		{"bad version", "version: 2\n", `line 1: version: unknown format version "2" (want 1)`},
		{"unknown top", "version: 1\nrulez: []\n", "line 2: rulez: unknown field (want one of version, rules, redact, secrets, sandboxes, agents)"},
		{"dup key", "version: 1\nversion: 1\n", "line 2: version: given twice (first at line 1)"},
		{"agents depth 0", "version: 1\nagents: {max_depth: 0}\n", `line 2: agents.max_depth: want a whole number from 1 to 5, got "0"`},
		{"agents children", "version: 1\nagents:\n  max_children: 101\n", `line 3: agents.max_children: want a whole number from 1 to 100, got "101"`},
		{"agents unknown", "version: 1\nagents: {depth: 3}\n", "line 2: agents.depth: unknown field"},
		{"rules not list", "version: 1\nrules: {}\n", "line 2: rules: want a list, got a mapping"},
		{"unknown rule field", rule("    action: deny\n    acton: deny\n"), "line 5: rules[0].acton: unknown field"},
		{"unknown match field", rule("    action: deny\n    match: {cmd: x}\n"), "line 5: rules[0].match.cmd: unknown field"},
		{"bad regexp", rule("    action: deny\n    match:\n      command: 'rm ('\n"), "line 6: rules[0].match.command: bad regexp: error parsing regexp: missing closing ): `rm (`"},
		{"long regexp", rule("    action: deny\n    match: {command: " + strings.Repeat("a", MaxPatternBytes+1) + "}\n"), "line 5: rules[0].match.command: 1025 bytes, more than 1024"},
		{"empty regexp", rule("    action: deny\n    match: {command: ''}\n"), "line 5: rules[0].match.command: empty"},
		{"bad glob", rule("    action: deny\n    match: {actor: 'mcp:\\'}\n"), `line 5: rules[0].match.actor: bad glob: it ends with a lone \`},
		{"glob class", rule("    action: deny\n    match: {node: 'web[12]'}\n"), "line 5: rules[0].match.node: bad glob: character classes"},
		{"bad label glob", rule("    action: deny\n    match:\n      node_labels:\n        env: 'p\\'\n"), "line 7: rules[0].match.node_labels.env: bad glob"},
		{"labels not map", rule("    action: deny\n    match: {session_labels: [a]}\n"), "line 5: rules[0].match.session_labels: want a mapping, got a list"},
		{"bad role", rule("    action: deny\n    match: {role: root}\n"), `line 5: rules[0].match.role: unknown role "root" (want viewer, operator or admin)`},
		{"unknown action", rule("    action: maybe\n"), `line 4: rules[0].action: unknown action "maybe" (want allow, deny or approve)`},
		{"no action", rule("    match: {role: admin}\n"), "line 3: rules[0].action: missing"},
		{"no name", "version: 1\nrules:\n  - action: deny\n", "line 3: rules[0].name: missing"},
		{"name with space", "version: 1\nrules:\n  - name: a b\n    action: deny\n", `line 3: rules[0].name: "a b" has spaces`},
		{"dup rule", rule("    action: deny\n  - name: r\n    action: allow\n"), `line 5: rules[1].name: rule "r" is already defined at line 3`},
		{"within on deny", rule("    action: deny\n    approve_within: 5m\n"), "line 5: rules[0].approve_within: only an approve rule waits (this one is deny)"},
		{"within not duration", rule("    action: approve\n    approve_within: soon\n"), `line 5: rules[0].approve_within: not a duration: "soon"`},
		{"within too long", rule("    action: approve\n    approve_within: 48h\n"), "line 5: rules[0].approve_within: 48h0m0s is outside [1s, 24h0m0s]"},
		{"alias", "version: 1\nrules:\n  - &a {name: r, action: deny}\n  - *a\n", "line 3: anchors and aliases are not supported"},
		{"alias value", "version: 1\nrules:\n  - name: &n r\n    action: deny\n", "line 3: anchors and aliases are not supported"},
		{"too many rules", "version: 1\nrules:\n" + strings.Repeat("  - {name: x, action: deny}\n", MaxRules+1), "line 3: rules: 1001 entries, more than 1000"},
		{"redact unbounded", "version: 1\nredact:\n  - name: k\n    pattern: 'a.*.*.*.*.*'\n", "line 4: redact[0].pattern: pattern can match more than 4096 bytes (unbounded repeats count 256)"},
		{"redact nested", "version: 1\nredact:\n  - {name: k, pattern: '(a+)+'}\n", "line 3: redact[0].pattern: bad regexp once repeats are capped at 256"},
		{"redact anchor", "version: 1\nredact:\n  - {name: k, pattern: '^key'}\n", "line 3: redact[0].pattern: anchors and word boundaries"},
		{"redact word boundary", "version: 1\nredact:\n  - {name: k, pattern: '\\bkey'}\n", "anchors and word boundaries"},
		{"redact empty match", "version: 1\nredact:\n  - {name: k, pattern: 'a?'}\n", "line 3: redact[0].pattern: pattern matches the empty string"},
		{"redact bad", "version: 1\nredact:\n  - {name: k, pattern: '[z-a]'}\n", "line 3: redact[0].pattern: bad regexp"},
		{"redact dup", "version: 1\nredact:\n  - {name: k, pattern: a}\n  - {name: k, pattern: b}\n", `line 4: redact[1].name: pattern "k" is already defined at line 3`},
		{"redact no pattern", "version: 1\nredact:\n  - {name: k}\n", "line 3: redact[0].pattern: missing"},
		{"redact unknown", "version: 1\nredact:\n  - {name: k, pattern: a, with: b}\n", "line 3: redact[0].with: unknown field (want one of name, pattern)"},
		{"too big", "version: 1\n#" + strings.Repeat("x", MaxBytes), "more than 262144"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse accepted it, want %q", tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), tt.want) && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want %q", err, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(designExample))
	f.Add([]byte(`{"version": 1, "rules": [{"name": "x", "action": "deny"}]}`))
	f.Add([]byte("version: 1\nrules:\n  - &a {name: r, action: deny}\n  - *a\n"))
	f.Add([]byte(secretsDoc))
	f.Add([]byte(sandboxDoc))
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := Parse(doc)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		// A parsed policy decides and redacts without panicking.
		d := p.Decide(Request{Command: string(doc), Actor: "mcp:x", Role: api.RoleOperator, Node: "n"})
		if d.Action != api.ActionAllow && d.Action != api.ActionDeny && d.Action != api.ActionApprove {
			t.Fatalf("action %q", d.Action)
		}
		for _, s := range p.Secrets {
			p.SecretFor(SecretRequest{Node: "n", Role: api.RoleOperator, Program: "sudo", Prompt: s.Prompt})
		}
		r := p.NewRedactor()
		_ = append(r.Write(doc), r.Flush()...)
		// A parsed policy's profiles are valid, and choosing one never panics.
		if p.Sandboxes != nil {
			for name, prof := range p.Sandboxes.Profiles {
				if err := prof.Validate(); err != nil || prof.Name != name {
					t.Fatalf("profile %s: %v", name, err)
				}
				if _, err := p.Sandbox(Request{Principal: "token:x", Agent: "claude"}, name); err != nil &&
					!errors.Is(err, ErrLooser) {
					t.Fatalf("ask %s: %v", name, err)
				}
			}
		}
	})
}
