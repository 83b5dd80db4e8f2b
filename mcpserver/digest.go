package mcpserver

import (
	"context"

	"github.com/fleetmux/fleetmux/api"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The catch_up tool (DESIGN "Digest"): what happened since a cursor, within a
// token budget.

// DigestFleet is what catch_up needs of the fleet (part of Fleet).
type DigestFleet interface {
	Digest(ctx context.Context, q api.DigestQuery) (api.Digest, error)
}

type catchUpIn struct {
	Since        string `json:"since,omitempty" jsonschema:"next of the last catch_up"`
	Node         string `json:"node,omitempty"`
	Session      string `json:"session,omitempty" jsonschema:"NODE/ID"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// CatchUp is catch_up's structured content.
type CatchUp struct {
	Next      string   `json:"next"`
	Failed    int      `json:"failed"`
	Waiting   int      `json:"waiting"`
	Pending   int      `json:"pending"`
	ReadBlock []string `json:"read_block"`
}

func (m *Server) addDigestTool() {
	addTool(m, &mcp.Tool{
		Name: "catch_up",
		Description: "What happened since a cursor (failures with output, what waits, approvals, successes), within budget_tokens. " +
			"Pass next as since next time.",
		Annotations: annRead("Catch up"),
		InputSchema: schemaOf[catchUpIn](func(p map[string]*jsonschema.Schema) { minimum(p, 0, "budget_tokens") }),
	}, nil, func(ctx context.Context, in catchUpIn) (*mcp.CallToolResult, CatchUp, error) {
		q := api.DigestQuery{Since: in.Since, Scope: api.ScopeFleet, BudgetTokens: in.BudgetTokens}
		switch {
		case in.Session != "":
			q.Scope, q.Session = api.ScopeSession, in.Session
		case in.Node != "":
			q.Scope, q.Node = api.ScopeNode, in.Node
		}
		d, err := m.f.Digest(ctx, q)
		if err != nil {
			return nil, CatchUp{}, m.explain(err, in.Node, "")
		}
		out := CatchUp{Next: d.Next, Failed: d.Failed, Waiting: d.Waiting, Pending: d.Pending, ReadBlock: d.ReadBlock}
		if out.ReadBlock == nil {
			out.ReadBlock = []string{}
		}
		return textResult(fence("digest", d.Text) + "\nnext: " + d.Next), out, nil
	})
}
