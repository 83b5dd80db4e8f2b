package trust

import (
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

func TestAllows(t *testing.T) {
	read := []string{"list", "get", "screen", "blocks", "block", "read", "wait"}
	write := []string{"create", "update", "run", "input", "keys", "resize", "close"} // close: the node checks the owner
	admin := []string{"policy", "some-future-verb"}
	for _, tc := range []struct {
		role                 string
		read, write, adminOK bool
	}{
		{api.RoleViewer, true, false, false},
		{api.RoleOperator, true, true, false},
		{api.RoleAdmin, true, true, true},
		{"", false, false, false},
		{"root", false, false, false},
		{"Admin", false, false, false},
		{"admin ", false, false, false},
	} {
		for _, group := range []struct {
			verbs []string
			want  bool
		}{{read, tc.read}, {write, tc.write}, {admin, tc.adminOK}} {
			for _, verb := range group.verbs {
				if got := Allows(tc.role, verb); got != group.want {
					t.Errorf("Allows(%q, %q) = %v, want %v", tc.role, verb, got, group.want)
				}
			}
		}
	}
}

func TestValidRole(t *testing.T) {
	for role, want := range map[string]bool{
		api.RoleViewer: true, api.RoleOperator: true, api.RoleAdmin: true,
		"": false, "root": false, "VIEWER": false, "viewer\x00": false,
	} {
		if got := ValidRole(role); got != want {
			t.Errorf("ValidRole(%q) = %v, want %v", role, got, want)
		}
	}
}
