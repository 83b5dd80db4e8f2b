package api

import "time"

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
