package httpapi

import (
	"slices"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// TestTable: every row of the route table names a role (one of api.Roles, or
// Public), a handler, and a pattern no other row has; only /healthz and the console's files and sign-in are public.
// The mux serves these rows and nothing else, so a route cannot exist without its
// row, and New refuses a row without a known role.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, rt := range table {
		p := rt.Pattern()
		if seen[p] {
			t.Errorf("route %s listed twice", p)
		}
		seen[p] = true
		if rt.serve == nil {
			t.Errorf("route %s has no handler", p)
		}
		if rt.Role != Public && !slices.Contains(api.Roles, rt.Role) {
			t.Errorf("route %s: role %q is not one of %v or %s", p, rt.Role, api.Roles, Public)
		}
		if rt.Role == Public && !slices.Contains(publicRoutes, p) {
			t.Errorf("route %s is public: only %v may be", p, publicRoutes)
		}
	}
	old := table
	defer func() { table = old }()
	table = append(slices.Clone(old), Route{"GET", "/v1/new", "", (*Server).health})
	if _, err := New(Config{Fleet: nilFleet{}}); err == nil {
		t.Error("New accepted a route with no role")
	}
}

// publicRoutes are the routes that need no token: health, and the web console's
// files and sign-in (which checks the token it is given).
var publicRoutes = []string{"GET /healthz", "GET /{$}", "GET /ui/{path...}", "POST /ui/signin"}

// nilFleet is a Fleet whose methods are never called (New does not call any).
type nilFleet struct{ Fleet }

// TestPolicyLimit: PUT /v1/policy reads as much as the policy may hold.
func TestPolicyLimit(t *testing.T) {
	if api.MaxPolicyBytes != policy.MaxBytes {
		t.Errorf("api.MaxPolicyBytes %d, policy.MaxBytes %d", api.MaxPolicyBytes, policy.MaxBytes)
	}
}
