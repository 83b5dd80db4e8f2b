package api

import (
	"strings"
	"time"
)

// API tokens (DESIGN.md, Trust model): GET/POST /v1/tokens, DELETE /v1/tokens/{name}.
// A token's text is shown once, in the reply of its creation; the controllers keep
// only its hash (package trust).

// Token is an API token as listed: its name, role and times, never its secret.
type Token struct {
	Name      string     `json:"name"`
	Role      string     `json:"role"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"` // nil: never expires
	// CreatedBy is the principal that created it (e.g. "token:ops").
	CreatedBy string `json:"created_by,omitempty"`
}

// TokenList is the reply of GET /v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// TokenRequest is the body of POST /v1/tokens: a new token's name
// (ValidName), role (RoleViewer, RoleOperator or RoleAdmin) and lifetime as a Go
// duration ("24h", "90m"; empty: it never expires).
type TokenRequest struct {
	Name string `json:"name"`
	Role string `json:"role"`
	TTL  string `json:"ttl,omitempty"`
}

// NewToken is the reply of POST /v1/tokens: the token as listed, and its text
// (the bearer secret), which nothing shows again.
type NewToken struct {
	Token
	Secret string `json:"secret"`
}

// CodeExists is the error code of a create whose name is taken (HTTP 409).
const CodeExists = "exists"

// BearerChallenge is the WWW-Authenticate header of a request refused for want
// of a valid API token (401), at /v1 and /mcp alike. fleetmux takes an API
// token as a bearer token and has no OAuth: an MCP client that gets a 401
// without an error of this kind looks for OAuth metadata and starts an
// authorization flow that cannot succeed. This one says what to do instead.
const BearerChallenge = `Bearer realm="fleetmux", error="invalid_token", ` +
	`error_description="fleetmux takes an API token, not OAuth: send Authorization: Bearer TOKEN (fleetmux token create makes one)"`

// NoOAuth is the message of the 404 that answers OAuth discovery and its
// default endpoints (OAuthPath).
const NoOAuth = "fleetmux has no OAuth: send an API token as Authorization: Bearer TOKEN (fleetmux token create makes one)"

// OAuthPath reports whether path is one an OAuth client asks for: the
// discovery documents under /.well-known (protected resource, authorization
// server, OpenID configuration) and the default /authorize, /token and
// /register endpoints MCP clients fall back to. fleetmux answers them 404 with
// NoOAuth, never a document that starts a flow.
func OAuthPath(path string) bool {
	switch {
	case strings.HasPrefix(path, "/.well-known/oauth-"), strings.HasPrefix(path, "/.well-known/openid-configuration"):
		return true
	}
	switch path {
	case "/authorize", "/token", "/register":
		return true
	}
	return false
}
