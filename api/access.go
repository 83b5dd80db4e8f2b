package api

// Access is DESIGN.md's "Roles everywhere": the least role each MCP tool needs
// (Tools; the HTTP routes' are rows of the route table of package httpapi). The MCP
// server checks every tool call against Tools, and a test walks every entry with
// every role.

// RoleNone as the need of RoleAtLeast is met by every caller.
const RoleNone = ""

// Tools maps the MCP server's tools to the least role they need.
var Tools = map[string]string{
	"list_nodes":        RoleViewer,
	"list_sessions":     RoleViewer,
	"read_screen":       RoleViewer,
	"read_block":        RoleViewer,
	"wait_for":          RoleViewer,
	"create_session":    RoleOperator,
	"run_command":       RoleOperator,
	"send_input":        RoleOperator,
	"send_keys":         RoleOperator,
	"set_session_info":  RoleOperator,
	"fanout_run":        RoleOperator,
	"close_session":     RoleOperator, // the node checks the owner (or admin)
	"list_agents":       RoleViewer,
	"wait_for_agent":    RoleViewer,
	"read_agent_output": RoleViewer,
	"spawn_agent":       RoleOperator,
	"send_to_agent":     RoleOperator,
	"interrupt_agent":   RoleOperator,
	"kill_agent":        RoleOperator, // the node checks the owner (or admin)
	"exec":              RoleOperator,
	"catch_up":          RoleViewer,
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
