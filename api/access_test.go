package api

import "testing"

func TestRoleAtLeast(t *testing.T) {
	for _, tc := range []struct {
		role, need string
		want       bool
	}{
		{RoleViewer, RoleViewer, true}, {RoleViewer, RoleOperator, false}, {RoleViewer, RoleAdmin, false},
		{RoleOperator, RoleViewer, true}, {RoleOperator, RoleOperator, true}, {RoleOperator, RoleAdmin, false},
		{RoleAdmin, RoleViewer, true}, {RoleAdmin, RoleOperator, true}, {RoleAdmin, RoleAdmin, true},
		{"", RoleViewer, false}, {"root", RoleViewer, false}, {RoleAdmin, "root", false},
		{"", RoleNone, true}, {RoleViewer, RoleNone, true},
	} {
		if got := RoleAtLeast(tc.role, tc.need); got != tc.want {
			t.Errorf("RoleAtLeast(%q, %q) = %v, want %v", tc.role, tc.need, got, tc.want)
		}
	}
	for k, v := range Tools {
		if roleRank(v) == 0 {
			t.Errorf("tool %q: unknown role %q", k, v)
		}
	}
}
