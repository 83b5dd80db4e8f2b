package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/fleetmux/fleetmux/api"
)

// API tokens (DESIGN.md, Trust model): every request but /healthz carries one
// ("Authorization: Bearer TOKEN"); its role must reach the route's row. The Fleet
// checks the token (Authenticate); guard puts the caller in the request's context,
// for the fleet (Fleet.WithCaller) and for the API's own use (callerOf).

// caller is who a request acts as, once authenticated: its principal
// ("token:NAME") and role. The Fleetmux-Actor header is a label beside it, never
// the principal.
type caller struct {
	principal, role string
	cookie          *cookieSession // the console sign-in it came with (nil: a bearer token)
}

type callerKey struct{}

// callerOf is the authenticated caller of ctx (zero when there is none).
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// Caller names the principal and role of a request the API authenticated ("" for
// one it did not): what /mcp's tool calls act as.
func Caller(r *http.Request) (principal, role string) {
	who := callerOf(r.Context())
	return who.principal, who.role
}

// authenticate finds the caller of a request from its bearer token, or, when it
// has no Authorization header, from the API token behind its console cookie
// (console.go): either way Fleet.Authenticate decides.
func (s *Server) authenticate(r *http.Request) (caller, *api.Error) {
	var cs *cookieSession
	auth := r.Header.Get("Authorization")
	text, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		text = "" // no token: Authenticate says so
		if cs = s.ui.session(r); auth == "" && cs != nil {
			text = cs.token
		} else {
			cs = nil
		}
	}
	principal, role, err := s.fleet.Authenticate(text, r.RemoteAddr)
	if err != nil {
		ae, ok := err.(*api.Error)
		if !ok {
			ae = api.Errorf(api.CodeUnauthorized, "wrong, revoked or expired API token")
		}
		return caller{}, ae
	}
	return caller{principal: principal, role: role, cookie: cs}, nil
}

// stillValid returns a check, safe to call from any goroutine, of whether the
// credential r was authenticated with is still accepted (not revoked, not expired).
// Streams that outlive their request (attach, follow) call it before every frame
// they forward, so revoking a token ends what it has open, not only its next
// request. One call is a map lookup and a constant-time hash comparison.
func (s *Server) stillValid(r *http.Request) func() bool {
	return func() bool {
		_, err := s.authenticate(r)
		return err == nil
	}
}

// errRevoked ends a stream whose token was revoked or expired while it was open.
var errRevoked = api.Errorf(api.CodeUnauthorized, "the API token of this stream was revoked or has expired")
