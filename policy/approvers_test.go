package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

func TestParseApprovers(t *testing.T) {
	doc := "version: 1\nrules:\n  - name: r\n    match: {command: '^reboot'}\n    action: approve\n    approvers: [operator]\n"
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Rules[0].Approvers, []string{api.RoleOperator}) {
		t.Fatalf("approvers = %v", p.Rules[0].Approvers)
	}
	d := p.Decide(Request{Command: "reboot now"})
	if d.Action != api.ActionApprove || !slices.Equal(p.Approvers(d.Rule), []string{api.RoleOperator}) {
		t.Fatalf("decision = %+v, approvers %v", d, p.Approvers(d.Rule))
	}
	if a := p.Approvers("nope"); a != nil {
		t.Fatalf("an unknown rule has approvers %v", a)
	}
	if a := (*Policy)(nil).Approvers("r"); a != nil {
		t.Fatalf("a nil policy has approvers %v", a)
	}
}

func TestParseApproversErrors(t *testing.T) {
	rule := func(body string) string { return "version: 1\nrules:\n  - name: r\n" + body }
	tests := []struct{ name, doc, want string }{
		{"on deny", rule("    action: deny\n    approvers: [operator]\n"), "line 5: rules[0].approvers: only an approve rule has approvers (this one is deny)"},
		{"bad role", rule("    action: approve\n    approvers: [root]\n"), `line 5: rules[0].approvers[0]: unknown role "root"`},
		{"twice", rule("    action: approve\n    approvers: [operator, operator]\n"), `line 5: rules[0].approvers[1]: role "operator" given twice`},
		{"not list", rule("    action: approve\n    approvers: operator\n"), `line 5: rules[0].approvers: want a list`},
		{"viewer", rule("    action: approve\n    approvers: [viewer]\n"), `line 5: rules[0].approvers[0]: viewers only read and watch`},
		{"too many", rule("    action: approve\n    approvers: [operator, admin, operator]\n"), `rules[0].approvers: 3 entries, more than 2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
		})
	}
}
