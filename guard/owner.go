package guard

import "github.com/fleetmux/fleetmux/api"

// MayClose decides whether w may close a session that owner created (owner: the
// verified principal of its create request; empty when not known): an admin may
// close any session, anyone else only one they created. The refusal is
// CodeForbidden naming the owner, so the caller knows whom to ask.
func MayClose(owner string, w Writer, node, id string) error {
	if w.Role == api.RoleAdmin {
		return nil
	}
	if owner != "" && w.Principal != "" && w.Principal == owner {
		return nil
	}
	if owner == "" {
		return api.Errorf(api.CodeForbidden, "session %s/%s has no known owner: only an admin may close it", node, id)
	}
	return api.Errorf(api.CodeForbidden, "session %s/%s belongs to %s: only its owner or an admin may close it", node, id, owner)
}
