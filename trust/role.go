package trust

import "github.com/fleetmux/fleetmux/api"

// ValidRole reports whether role is one of api.RoleViewer, api.RoleOperator and
// api.RoleAdmin.
func ValidRole(role string) bool {
	switch role {
	case api.RoleViewer, api.RoleOperator, api.RoleAdmin:
		return true
	}
	return false
}

// Allows reports whether role may use verb (a node API verb): role is at least the
// verb's least role in api.NodeVerbs. admin may use every verb, including any verb
// added later. An unknown role may do nothing.
func Allows(role, verb string) bool {
	if role == api.RoleAdmin {
		return true
	}
	v, ok := api.NodeVerb(verb)
	return ok && api.RoleAtLeast(role, v.Role)
}
