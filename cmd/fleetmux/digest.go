package main

import (
	"context"
	"fmt"
	"io"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// digestCmd is `fleetmux digest` (DESIGN "Digest"): what happened since a
// cursor, within a token budget.
func digestCmd() *cobra.Command {
	var o clientOptions
	var q api.DigestQuery
	c := &cobra.Command{
		Use:   "digest [--since CURSOR] [--node NODE | --session NODE/ID] [--budget TOKENS]",
		Short: "What happened since a cursor: failures, what waits, approvals, successes",
		Long: "digest prints what happened in the fleet (or on --node, or in --session) since\n" +
			"--since (the cursor the last digest printed; none: from the beginning), within\n" +
			"--budget tokens (a token is counted as 4 bytes): what waits for input now, pending\n" +
			"approvals, failed commands with the head and tail of their output, decided\n" +
			"approvals, agents and sessions that changed, what still runs, and successes one\n" +
			"line each. Where the budget cuts, the last line says what was left out. The next\n" +
			"cursor goes to stderr (with --json: in the reply's next).",
		Example: "  fleetmux digest --budget 1000\n  fleetmux digest --since c1764285000000000000 --node web-1",
		Args:    exactArgs("digest", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			switch {
			case q.Node != "" && q.Session != "":
				return usageError("digest: give --node or --session, not both")
			case q.Session != "":
				q.Scope = api.ScopeSession
			case q.Node != "":
				q.Scope = api.ScopeNode
			}
			d, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.Digest, error) {
				return cl.Digest(ctx, q)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				if _, err := io.WriteString(w, d.Text); err != nil {
					return err
				}
				_, err := fmt.Fprintf(c.ErrOrStderr(), "next: fleetmux digest --since %s\n", d.Next)
				return err
			})
		},
	}
	f := c.Flags()
	f.StringVar(&q.Since, "since", "", "the cursor of the last digest (its next)")
	f.StringVar(&q.Node, "node", "", "only this node")
	f.StringVar(&q.Session, "session", "", "only this session (NODE/ID)")
	f.IntVar(&q.BudgetTokens, "budget", api.DefaultDigestTokens, "the most tokens the digest may take (4 bytes a token)")
	o.register(c, true)
	return c
}
