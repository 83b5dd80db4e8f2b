package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

const decidePolicy = `version: 1
rules:
  - name: no-disk-wipes
    match: {command: '(^|[;&|]\s*)(rm\s+-[a-z]*r[a-z]*f?\s+/(\s|$)|mkfs|dd\s.*of=/dev/)'}
    action: deny
  - name: viewers-read-only
    match: {role: viewer}
    action: deny
  - name: ci-stays-out-of-prod
    match: {principal: 'token:ci*', node_labels: {env: prod}}
    action: deny
  - name: prod-needs-a-human
    match: {node_labels: {env: prod}, actor: 'mcp:*'}
    action: approve
    approve_within: 2m
  - name: web-ci
    match: {node: 'web-??', session_labels: {team: 'ci*'}}
    action: approve
  - name: safe-reads
    match: {command: '^(ls|cat|pwd)( |$)'}
    action: allow
  - name: no-reboot
    match: {command: '^reboot'}
    action: deny
`

func TestDecide(t *testing.T) {
	p, err := Parse([]byte(decidePolicy))
	if err != nil {
		t.Fatal(err)
	}
	p.Version = 42
	op := func(cmd string) Request {
		return Request{Command: cmd, Actor: "ssh:alice", Role: api.RoleOperator, Node: "db-1"}
	}
	prod := map[string]string{"env": "prod"}
	tests := []struct {
		name string
		req  Request
		act  string
		rule string
	}{
		{"plain", op("echo hi"), api.ActionAllow, ""},
		{"wipe", op("rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe fr", op("rm -fr /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe after ;", op("echo hi; rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe after &&", op("true&&rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe on line 2", op("echo hi\nrm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe after CR", op("echo hi\rrm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe with path", op("/bin/rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe escaped", op(`\rm -rf /`), api.ActionDeny, "no-disk-wipes"},
		{"wipe quoted", op(`"rm" -rf /`), api.ActionDeny, "no-disk-wipes"},
		{"wipe split quotes", op(`r''m -rf /`), api.ActionDeny, "no-disk-wipes"},
		{"wipe with tabs", op("rm\t-rf\t/"), api.ActionDeny, "no-disk-wipes"},
		{"wipe with sudo", op("sudo rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe with env", op("FOO=1 env nice rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe with wrapper paths", op("/usr/bin/env /usr/bin/sudo rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe with wrapper options", op("sudo -u root -E nice -n 5 env -i timeout -s KILL 9 rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"wipe in bash -c", op("bash -c 'rm -rf /'"), api.ActionDeny, "no-disk-wipes"},
		{"wipe in sh -c --", op("/bin/sh -c -- 'echo; rm -rf /'"), api.ActionDeny, "no-disk-wipes"},
		{"wipe in bash -o posix -c", op("sudo bash -o posix -c -x 'rm -rf /'"), api.ActionDeny, "no-disk-wipes"},
		{"wipe in nested -c", op(`env -S 'bash -c "sh -c \"rm -rf /\""'`), api.ActionDeny, "no-disk-wipes"},
		{"wipe in subshell", op("(rm -rf /)"), api.ActionDeny, "no-disk-wipes"},
		{"wipe in group", op("{ rm -rf /; }"), api.ActionDeny, "no-disk-wipes"},
		{"wipe in substitution", op("echo $(rm -rf /)"), api.ActionDeny, "no-disk-wipes"},
		{"wipe in quoted substitution", op(`echo "$(rm -rf /)"`), api.ActionDeny, "no-disk-wipes"},
		{"wipe in backticks", op("echo `rm -rf /`"), api.ActionDeny, "no-disk-wipes"},
		{"wipe after pipe", op("yes | rm -rf /"), api.ActionDeny, "no-disk-wipes"},
		{"mkfs", op("mkfs.ext4 /dev/sda1"), api.ActionDeny, "no-disk-wipes"},
		{"dd", op("dd if=/dev/zero of=/dev/sda"), api.ActionDeny, "no-disk-wipes"},
		{"rm a dir", op("rm -rf /tmp/x"), api.ActionAllow, ""},
		{"viewer", Request{Command: "ls", Role: api.RoleViewer}, api.ActionDeny, "viewers-read-only"},
		{"prod agent", Request{Command: "uptime", Actor: "mcp:claude", Role: api.RoleOperator, NodeLabels: prod}, api.ActionApprove, "prod-needs-a-human"},
		{"prod person", Request{Command: "uptime", Actor: "ssh:alice", Role: api.RoleOperator, NodeLabels: prod}, api.ActionAllow, ""},
		{"staging agent", Request{Command: "uptime", Actor: "mcp:claude", Role: api.RoleOperator, NodeLabels: map[string]string{"env": "staging"}}, api.ActionAllow, ""},
		{"agent no labels", Request{Command: "uptime", Actor: "mcp:claude", Role: api.RoleOperator}, api.ActionAllow, ""},
		{"ci token in prod", Request{Command: "uptime", Principal: "token:ci-2", Actor: "mcp:claude", Role: api.RoleOperator, NodeLabels: prod}, api.ActionDeny, "ci-stays-out-of-prod"},
		{"ci token renamed", Request{Command: "uptime", Principal: "token:ci-2", Actor: "ssh:alice", Role: api.RoleOperator, NodeLabels: prod}, api.ActionDeny, "ci-stays-out-of-prod"},
		{"ci label is not the ci token", Request{Command: "uptime", Principal: "token:ops", Actor: "token:ci", Role: api.RoleOperator, NodeLabels: prod}, api.ActionAllow, ""},
		{"actor glob crosses slash", Request{Actor: "mcp:a/b", NodeLabels: prod}, api.ActionApprove, "prod-needs-a-human"},
		{"node glob", Request{Node: "web-01", SessionLabels: map[string]string{"team": "ci-bot"}}, api.ActionApprove, "web-ci"},
		{"node glob too long", Request{Node: "web-001", SessionLabels: map[string]string{"team": "ci-bot"}}, api.ActionAllow, ""},
		{"allow read", op("ls -l; cat x"), api.ActionAllow, "safe-reads"},
		{"allow does not cover a second command", op("ls; reboot"), api.ActionDeny, "no-reboot"},
		{"allow does not cover a substitution", op("cat $(reboot)"), api.ActionDeny, "no-reboot"},
		{"allow does not cover a new line", op("ls\nreboot"), api.ActionDeny, "no-reboot"},
		{"comment is not a command", op("ls # ; reboot"), api.ActionAllow, "safe-reads"},
		{"quoted ; stays", op("cat 'a;b'"), api.ActionAllow, "safe-reads"},
		{"reboot", op("reboot"), api.ActionDeny, "no-reboot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(tt.req)
			if d.Action != tt.act || d.Rule != tt.rule || d.Version != 42 {
				t.Errorf("Decide(%+v) = %+v, want %s by %q (version 42)", tt.req, d, tt.act, tt.rule)
			}
		})
	}
	if d := p.Decide(Request{Actor: "mcp:x", NodeLabels: prod}); d.ApproveWithin != 2*time.Minute {
		t.Errorf("approve_within = %v, want 2m", d.ApproveWithin)
	}
}

func TestDecideNilPolicy(t *testing.T) {
	var p *Policy
	if d := p.Decide(Request{Command: "rm -rf /"}); d != (Decision{Action: api.ActionAllow}) {
		t.Fatalf("nil policy decided %+v", d)
	}
}

func TestSimpleCommands(t *testing.T) {
	tests := []struct{ in, want string }{
		{"ls", "ls"},
		{"  ls   -l  ", "ls -l"},
		{"a; b && c || d | e & f", "a|b|c|d|e|f"},
		{`echo "a; b" 'c|d' e\;f`, "echo a; b c|d e;f"},
		{"echo `x` $(y) \"$(z)\"", "echo|x|y|z"},
		{"a # b; c\nd", "a|d"},
		{"x#y", "x#y"},
		{"{ a; }", "a"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := strings.Join(simpleCommands(tt.in), "|"); got != tt.want {
			t.Errorf("simpleCommands(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// bigPolicy has n rules of which none matches benchRequest but the last.
func bigPolicy(n int) string {
	var b strings.Builder
	b.WriteString("version: 1\nrules:\n")
	for i := 0; i < n-1; i++ {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, "  - {name: r%d, match: {command: '(^|[;&|]\\s*)tool%d\\s+--danger'}, action: deny}\n", i, i)
		case 1:
			fmt.Fprintf(&b, "  - {name: r%d, match: {actor: 'mcp:bot%d*', node_labels: {env: prod}}, action: approve}\n", i, i)
		case 2:
			fmt.Fprintf(&b, "  - {name: r%d, match: {node: 'db-%d?', role: operator}, action: deny}\n", i, i)
		}
	}
	b.WriteString("  - {name: last, action: allow}\n")
	return b.String()
}

func BenchmarkDecide50(b *testing.B) {
	p, err := Parse([]byte(bigPolicy(50)))
	if err != nil {
		b.Fatal(err)
	}
	req := Request{Command: "cd /srv/app && make test | tee log.txt", Actor: "mcp:claude", Role: api.RoleOperator,
		Node: "web-1", NodeLabels: map[string]string{"env": "prod"}, SessionLabels: map[string]string{"team": "ci"}}
	b.ReportAllocs()
	for b.Loop() {
		if d := p.Decide(req); d.Rule != "last" {
			b.Fatalf("decided %+v", d)
		}
	}
}
