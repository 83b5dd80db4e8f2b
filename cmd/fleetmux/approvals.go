package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// The approval verbs (DESIGN.md "Guardrails"): approvals lists the commands held
// by an approve rule, approve and deny decide one.

func approvalsCmd() *cobra.Command {
	var o clientOptions
	var state, node string
	c := &cobra.Command{
		Use:   "approvals",
		Short: "List commands held for a person's approval",
		Long: "approvals lists the commands an approve rule of the policy holds, fleet-wide,\n" +
			"oldest first: pending ones by default (--state approved|denied|expired|all).\n" +
			"Decide one with `fleetmux approve NODE/ID` or `fleetmux deny NODE/ID`.",
		Example: "  fleetmux approvals\n  fleetmux approvals --state all --node web-1",
		Args:    exactArgs("approvals", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			switch state {
			case "", "all", api.ApprovalPending, api.ApprovalApproved, api.ApprovalDenied, api.ApprovalExpired:
			default:
				return usageError("approvals: --state %q: want pending, approved, denied, expired or all", state)
			}
			if node != "" {
				if err := api.ValidName(node); err != nil {
					return usageError("approvals: --node: %s", nameErr(err))
				}
			}
			l, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.ApprovalList, error) {
				return cl.Approvals(ctx, node, state)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printApprovals(w, l) })
		},
	}
	c.Flags().StringVar(&state, "state", "", "pending (default), approved, denied, expired or all")
	c.Flags().StringVar(&node, "node", "", "only this node's approvals")
	o.register(c, true)
	return c
}

// printApprovals prints one approval a line: address, state, session, who asked,
// the rule, when it expires or how it was decided (an approved command's block and
// exit code first), and the command.
func printApprovals(w io.Writer, l api.ApprovalList) error {
	tw := table(w)
	fmt.Fprintln(tw, "APPROVAL\tSTATE\tSESSION\tASKED BY\tRULE\tWHEN\tCOMMAND")
	now := time.Now()
	for _, a := range l.Approvals {
		when := "expires in " + a.ExpiresAt.Sub(now).Round(time.Second).String()
		switch {
		case a.State != api.ApprovalPending && a.DecidedBy != "":
			when = "by " + a.DecidedBy
		case a.State != api.ApprovalPending:
			when = a.Reason
		}
		if a.Block > 0 {
			// What came of it first: a long decider is what the cell cuts.
			ran := "block " + strconv.Itoa(a.Block)
			if a.ExitCode != nil {
				ran += " exit " + strconv.Itoa(*a.ExitCode)
			}
			when = ran + ", " + when
		}
		asked := a.Principal
		if asked == "" {
			asked = a.Actor
		}
		command := a.Command
		if a.Kind == api.ApprovalAgentTool {
			command = a.Agent + " " + a.Tool + ": " + command // an agent waits to use a tool
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(a.Addr(), 40), a.State, cell(a.Node+"/"+a.Session, 40),
			cell(asked, 40), cell(a.Rule, 40), cell(when, 60), cell(command, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(l.Unavailable) > 0 {
		fmt.Fprintf(w, "(nodes that did not answer: %v)\n", l.Unavailable)
	}
	return nil
}

func approveCmd() *cobra.Command { return decideCmd(api.DecisionApprove) }
func denyCmd() *cobra.Command    { return decideCmd(api.DecisionDeny) }

// decideCmd is `approve` or `deny`.
func decideCmd(decision string) *cobra.Command {
	var o clientOptions
	var reason string
	verb := decision
	c := &cobra.Command{
		Use:   verb + " NODE/ID",
		Short: map[string]string{api.DecisionApprove: "Approve a held command (it then runs)", api.DecisionDeny: "Deny a held command (it never runs)"}[decision],
		Long: verb + " decides a pending approval (see `fleetmux approvals`). Deciding needs the admin\n" +
			"role, or a role the rule names in approvers; nobody approves what they asked for\n" +
			"themselves. An approved run is typed by the node into its session; the reply\n" +
			"prints the approval.",
		Example: "  fleetmux " + verb + " web-1/a3 --reason \"checked with the team\"",
		Args:    exactArgs(verb, 1, "approval address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := api.ParseApprovalAddr(args[0])
			if err != nil {
				return usageError("%s: %s", verb, nameErr(err))
			}
			a, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.Approval, error) {
				return cl.Decide(ctx, node, id, api.DecideBody{Decision: decision, Reason: reason})
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "%s %s: %s in %s/%s\n", a.Addr(), a.State, api.OneLine(a.Command, 200), a.Node, a.Session)
				return err
			})
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why (recorded in the audit and shown to who asked)")
	o.register(c, true)
	return c
}
