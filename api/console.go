package api

import "time"

// The web console's sign-in (DESIGN.md, Console): the controller serves it at /
// and /ui/…; these are its replies.

// ConsoleMe is who the console is signed in as (POST /ui/signin, GET /ui/me):
// the principal and role of the API token behind the session cookie, the CSRF
// token every mutation sends in the X-Fleetmux-CSRF header, and when the
// sign-in ends. A bearer request gets its principal and role only.
type ConsoleMe struct {
	Principal string    `json:"principal"`
	Role      string    `json:"role"`
	CSRF      string    `json:"csrf,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// ConsoleLink is a one-time console sign-in link (POST /ui/links, fleetmux ui):
// the path to open on the controller's address (its code is in the fragment,
// which no server or log sees), valid once until ExpiresAt.
type ConsoleLink struct {
	Path      string    `json:"path"`
	ExpiresAt time.Time `json:"expires_at"`
}
