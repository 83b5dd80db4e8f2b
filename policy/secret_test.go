package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

const secretsDoc = `version: 1
secrets:
  - name: sudo-web
    roles: [operator, admin]
    nodes: 'web-*'
  - name: deploy-key
    principals: ['token:deploy*']
    programs: [ssh-add, sudo]
    prompt: 'passphrase for [^:]*: $'
`

func TestParseSecrets(t *testing.T) {
	p, err := Parse([]byte(secretsDoc))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Secrets) != 2 {
		t.Fatalf("%d secrets", len(p.Secrets))
	}
	s := p.Secrets[0]
	if s.Name != "sudo-web" || s.Nodes != "web-*" || s.Prompt != DefaultSecretPrompt || len(s.Roles) != 2 || s.Line != 3 {
		t.Fatalf("secret 0 = %+v", s)
	}
}

func TestSecretFor(t *testing.T) {
	p, err := Parse([]byte(secretsDoc))
	if err != nil {
		t.Fatal(err)
	}
	sudo := SecretRequest{Node: "web-1", Principal: "ssh:SHA256:x", Role: api.RoleOperator, Program: "sudo", Prompt: "[sudo] password for bob: "}
	with := func(f func(*SecretRequest)) SecretRequest { r := sudo; f(&r); return r }
	for _, tt := range []struct {
		name string
		req  SecretRequest
		want string // "" for none
	}{
		{"sudo prompt on a web node", sudo, "sudo-web"},
		{"admin", with(func(r *SecretRequest) { r.Role = api.RoleAdmin }), "sudo-web"},
		{"viewer", with(func(r *SecretRequest) { r.Role = api.RoleViewer }), ""},
		{"no role", with(func(r *SecretRequest) { r.Role = "" }), ""},
		{"another node", with(func(r *SecretRequest) { r.Node = "db-1" }), ""},
		{"another program", with(func(r *SecretRequest) { r.Program = "bash" }), ""},
		{"a fake prompt by a shell", with(func(r *SecretRequest) { r.Program = "read" }), ""},
		{"not a password prompt", with(func(r *SecretRequest) { r.Prompt = "Continue? [y/N] " }), ""},
		{"password said mid-line", with(func(r *SecretRequest) { r.Prompt = "the password: is wrong, try again later" }), ""},
		{"passwd's prompt", with(func(r *SecretRequest) { r.Prompt = "Current password: " }), "sudo-web"},
		{"su's prompt", with(func(r *SecretRequest) { r.Prompt = "Password: " }), "sudo-web"},
		{"deploy principal at ssh-add", SecretRequest{Node: "db-1", Principal: "token:deploy-1", Role: api.RoleOperator, Program: "ssh-add",
			Prompt: "Enter passphrase for /root/.ssh/id_ed25519: "}, "deploy-key"},
		{"deploy principal as a viewer", SecretRequest{Node: "db-1", Principal: "token:deploy-1", Role: api.RoleViewer, Program: "ssh-add",
			Prompt: "Enter passphrase for /root/.ssh/id_ed25519: "}, ""},
		{"another principal at ssh-add", SecretRequest{Node: "db-1", Principal: "token:ci", Role: api.RoleAdmin, Program: "ssh-add",
			Prompt: "Enter passphrase for /root/.ssh/id_ed25519: "}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := p.SecretFor(tt.req)
			if got := map[bool]string{true: s.Name}[ok]; got != tt.want {
				t.Fatalf("SecretFor = %q (%v), want %q", got, ok, tt.want)
			}
		})
	}
	var none *Policy
	if _, ok := none.SecretFor(sudo); ok {
		t.Fatal("a nil policy has a secret")
	}
}

func TestParseSecretErrors(t *testing.T) {
	doc := func(body string) string { return "version: 1\nsecrets:\n  - name: s\n" + body }
	for _, tt := range []struct{ doc, want string }{
		{doc("    roles: [viewer]\n"), "line 4: secrets[0].roles[0]: viewers never write"},
		{doc("    roles: [root]\n"), `line 4: secrets[0].roles[0]: unknown role "root"`},
		{doc("    roles: [admin, admin]\n"), `secrets[0].roles[1]: role "admin" given twice`},
		{doc(""), "secrets[0]: names neither roles nor principals"},
		{doc("    roles: [admin]\n    prompt: '('\n"), "secrets[0].prompt: bad regexp"},
		{doc("    roles: [admin]\n    programs: [/usr/bin/sudo]\n"), "secrets[0].programs[0]: \"/usr/bin/sudo\": want a program's name"},
		{doc("    roles: [admin]\n    nodes: 'web-[12]'\n"), "secrets[0].nodes: bad glob"},
		{doc("    roles: [admin]\n    secret: hunter2\n"), `secrets[0].secret: unknown field`},
		{"version: 1\nsecrets:\n  - {name: 'a b', roles: [admin]}\n", "secrets[0].name:"},
		{"version: 1\nsecrets:\n  - {name: s, roles: [admin]}\n  - {name: s, roles: [operator]}\n", `secret "s" already has an entry at line 3`},
		{"version: 1\nsecrets: {name: s}\n", "secrets: want a list"},
	} {
		_, err := Parse([]byte(tt.doc))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.doc, err, tt.want)
		}
	}
}
