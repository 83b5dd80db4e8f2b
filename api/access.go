package api

// Access is DESIGN.md's "Roles everywhere" as one table: the least role each HTTP
// route and each MCP tool needs. The controller checks every request's route
// against Routes (a route missing from it is refused to everyone), the MCP server
// every tool call against Tools; the README prints both, and a test walks every
// entry with every role.

// RoleNone marks a route that needs no token (health).
const RoleNone = ""

// Routes maps the controller's route patterns (net/http ServeMux patterns) to the
// least role they need.
var Routes = map[string]string{
	"GET /healthz":                            RoleNone,
	"GET /metrics":                            RoleViewer,
	"GET /v1/nodes":                           RoleViewer,
	"GET /v1/sessions":                        RoleViewer,
	"POST /v1/sessions":                       RoleOperator,
	"GET /v1/sessions/{node}/{id}":            RoleViewer,
	"PATCH /v1/sessions/{node}/{id}":          RoleOperator,
	"DELETE /v1/sessions/{node}/{id}":         RoleAdmin,
	"POST /v1/sessions/{node}/{id}/run":       RoleOperator,
	"POST /v1/sessions/{node}/{id}/input":     RoleOperator,
	"POST /v1/sessions/{node}/{id}/keys":      RoleOperator,
	"POST /v1/sessions/{node}/{id}/resize":    RoleOperator,
	"POST /v1/sessions/{node}/{id}/take_over": RoleOperator,
	"GET /v1/nodes/{node}/secrets":            RoleAdmin,
	"PUT /v1/nodes/{node}/secrets/{name}":     RoleAdmin,
	"DELETE /v1/nodes/{node}/secrets/{name}":  RoleAdmin,
	"GET /v1/sessions/{node}/{id}/screen":     RoleViewer,
	"GET /v1/sessions/{node}/{id}/blocks":     RoleViewer,
	"GET /v1/sessions/{node}/{id}/blocks/{n}": RoleViewer,
	"GET /v1/sessions/{node}/{id}/output":     RoleViewer,
	"GET /v1/sessions/{node}/{id}/wait":       RoleViewer,
	"GET /v1/sessions/{node}/{id}/attach":     RoleViewer, // typing needs operator: the node checks input
	"POST /v1/run":                            RoleOperator,
	"GET /v1/approvals":                       RoleViewer,
	"GET /v1/approvals/{node}/{id}":           RoleViewer,
	"POST /v1/approvals/{node}/{id}":          RoleOperator, // the node checks the approval's approvers (admin by default)
	"GET /v1/tokens":                          RoleAdmin,
	"POST /v1/tokens":                         RoleAdmin,
	"DELETE /v1/tokens/{name}":                RoleAdmin,
	"GET /v1/policy":                          RoleOperator, // the rules one works under; no secrets
	"PUT /v1/policy":                          RoleAdmin,
	"DELETE /v1/policy":                       RoleAdmin,
	"GET /v1/openapi.yaml":                    RoleViewer,
	"/mcp":                                    RoleViewer, // each tool call is checked against Tools
}

// Tools maps the MCP server's tools to the least role they need.
var Tools = map[string]string{
	"list_nodes":       RoleViewer,
	"list_sessions":    RoleViewer,
	"read_screen":      RoleViewer,
	"read_block":       RoleViewer,
	"wait_for":         RoleViewer,
	"create_session":   RoleOperator,
	"run_command":      RoleOperator,
	"send_input":       RoleOperator,
	"send_keys":        RoleOperator,
	"set_session_info": RoleOperator,
	"fanout_run":       RoleOperator,
	"close_session":    RoleAdmin,
}

// Roles lists the roles from the least to the most able.
var Roles = []string{RoleViewer, RoleOperator, RoleAdmin}

// RoleAtLeast reports whether role may do what need allows: each role may do
// everything the one before it may. An unknown role has no rights; RoleNone as
// need is met by every caller, even one without a role.
func RoleAtLeast(role, need string) bool {
	if need == RoleNone {
		return true
	}
	r, n := roleRank(role), roleRank(need)
	return r > 0 && n > 0 && r >= n
}

func roleRank(role string) int {
	for i, r := range Roles {
		if r == role {
			return i + 1
		}
	}
	return 0
}
