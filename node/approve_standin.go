package node

import (
	"context"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// approve is the stand-in for approvals (helper "approve" replaces this file with
// node/approval.go): until people can decide, an approve decision is a denial that
// names its rule.
func (n *Node) approve(ctx context.Context, e *entry, w writer, command string, d policy.Decision) error {
	return &api.Error{Code: api.CodeDenied, Rule: d.Rule,
		Message: "rule " + quoteRule(d.Rule) + " needs a person's approval, and approvals are not available yet: denied"}
}
