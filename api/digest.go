package api

import (
	"strconv"
	"strings"
	"time"
)

// Digest (DESIGN "Digest"): what happened in the fleet since a cursor, within a
// token budget, made without a model: the same fleet and cursor give the same
// text.

// Digest scopes.
const (
	ScopeFleet   = "fleet"
	ScopeNode    = "node"
	ScopeSession = "session"
)

// Digest budgets, in tokens (DigestTokens).
const (
	DefaultDigestTokens = 2000
	MinDigestTokens     = 200
	MaxDigestTokens     = 100000
)

// DigestQuery is GET /v1/digest's query: since (a cursor from an earlier
// digest's next; empty: from the beginning), scope with node (scope node) or
// session NODE/ID (scope session), and the budget in tokens.
type DigestQuery struct {
	Since        string `json:"since,omitempty"`
	Scope        string `json:"scope,omitempty"`
	Node         string `json:"node,omitempty"`
	Session      string `json:"session,omitempty"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// Digest is the reply of GET /v1/digest.
type Digest struct {
	Scope string `json:"scope"`
	Since string `json:"since"`
	// Next is the cursor of the next digest: everything up to it is in this one
	// (whole, or counted where the budget cut it).
	Next         string `json:"next"`
	BudgetTokens int    `json:"budget_tokens"`
	// Tokens is Text counted as DigestTokens counts.
	Tokens int    `json:"tokens"`
	Text   string `json:"text"`
	// Counts of what happened since the cursor.
	Failed    int `json:"failed"`
	Succeeded int `json:"succeeded"`
	Running   int `json:"running"`
	Waiting   int `json:"waiting"`
	Pending   int `json:"pending"`
	Decided   int `json:"decided"`
	// Omitted is how many items the budget left out of Text (counted there).
	Omitted int `json:"omitted"`
	// ReadBlock points at blocks whose output was cut or left out, as
	// "NODE/SESSION#N" (read them with read_block or GET …/blocks/{n}).
	ReadBlock   []string `json:"read_block"`
	Unavailable []string `json:"unavailable,omitempty"`
}

// DigestTokens counts text the way a model's tokenizer does, approximately: one
// token per 4 bytes, rounded up. (English prose and shell output average 3.5 to
// 4.5 bytes a token with the common tokenizers.)
func DigestTokens(text string) int { return (len(text) + 3) / 4 }

// DigestCursor is the cursor of time t.
func DigestCursor(t time.Time) string { return "c" + strconv.FormatInt(t.UnixNano(), 10) }

// ParseDigestCursor reads a cursor ("": the zero time).
func ParseDigestCursor(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(s, "c"), 10, 64)
	if err != nil || !strings.HasPrefix(s, "c") || n < 0 {
		return time.Time{}, Errorf(CodeBadRequest, "since %q is not a digest cursor (the next of an earlier digest)", OneLine(s, 64))
	}
	return time.Unix(0, n).UTC(), nil
}

// VerbDigestBlocks is the node verb that gives a digest every session's blocks of
// the window in one request (DigestBlocksRequest → DigestBlocks): a fleet of 100
// sessions is one request per node, not one per session.
const VerbDigestBlocks = "digest_blocks"

// DigestBlocksRequest asks for the blocks still running or finished after Since.
type DigestBlocksRequest struct {
	Since time.Time `json:"since"`
}

// DigestBlocks is a node's reply to VerbDigestBlocks: session id → its blocks
// still running or finished after the request's Since (sessions without any are
// left out).
type DigestBlocks struct {
	Sessions map[string][]Block `json:"sessions"`
}
