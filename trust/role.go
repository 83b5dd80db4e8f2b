package trust

import "github.com/fleetmux/fleetmux/api"

// Verbs that a viewer may use: reading and watching.
var viewerVerbs = map[string]bool{
	"list": true, "get": true, "screen": true, "blocks": true, "block": true, "read": true, "wait": true,
	"approvals": true, "approval": true,
}

// Verbs that an operator may use beyond a viewer's: creating sessions, running,
// typing and resizing.
var operatorVerbs = map[string]bool{
	"create": true, "update": true, "run": true, "input": true, "keys": true, "resize": true,
	// decide: the node checks the role against the approval too (admin, or a role
	// its rule names as approver).
	"decide":    true,
	"take_over": true,
	// close: the node lets an operator close only the sessions it created
	// (guard.MayClose); an admin closes any.
	"close": true,
}

// ValidRole reports whether role is one of api.RoleViewer, api.RoleOperator and
// api.RoleAdmin.
func ValidRole(role string) bool {
	switch role {
	case api.RoleViewer, api.RoleOperator, api.RoleAdmin:
		return true
	}
	return false
}

// Allows reports whether role may use verb (a node API verb). Each role may do
// everything the one before it may; admin may use every verb, including any verb
// added later. An unknown role may do nothing.
func Allows(role, verb string) bool {
	switch role {
	case api.RoleAdmin:
		return true
	case api.RoleOperator:
		return viewerVerbs[verb] || operatorVerbs[verb]
	case api.RoleViewer:
		return viewerVerbs[verb]
	}
	return false
}
