package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// policyCmd is `fleetmux policy set|show|rm`: the guardrail policy.
func policyCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "policy set FILE|show|rm",
		Short: "Set, show or remove the guardrail policy",
		Long: "The policy (docs/guardrails.md) is one YAML document kept in the\n" +
			"FLEETMUX_POLICY bucket: every node applies each new version within a second\n" +
			"and decides every command by it before it runs (run, fan-out, typed lines);\n" +
			"every decision names the version. Without a policy everything is allowed.\n" +
			"set and rm need the admin role, show the operator role.",
		Args: exactArgs("policy", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(policySetCmd(), policyShowCmd(), policyRmCmd())
	return c
}

func policySetCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:   "set FILE",
		Short: "Set the policy from FILE (- for stdin); prints its version",
		Long: "set checks the document (a bad one is refused with its line and field, and\n" +
			"nothing changes) and stores it as the policy in force.",
		Example: "  fleetmux policy set policy.yaml\n  fleetmux policy set - < policy.yaml",
		Args:    exactArgs("policy set", 1, "FILE (or - for stdin)"),
		RunE: func(c *cobra.Command, args []string) error {
			var doc []byte
			var err error
			if args[0] == "-" {
				doc, err = io.ReadAll(c.InOrStdin())
			} else {
				doc, err = os.ReadFile(args[0])
			}
			if err != nil {
				return usageError("policy set: %v", err)
			}
			pi, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.PolicyInfo, error) {
				return cl.SetPolicy(ctx, doc)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "policy version %d in force (%d rules, %d redact patterns)\n", pi.Version, pi.Rules, pi.Redacts)
				return err
			})
		},
	}
	o.register(c, true)
	return c
}

func policyShowCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:     "show",
		Aliases: []string{"get"},
		Short:   "Print the policy in force (its version on stderr)",
		Args:    exactArgs("policy show", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			pi, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.PolicyInfo, error) {
				return cl.Policy(ctx)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				if pi.Version == 0 {
					fmt.Fprintln(c.ErrOrStderr(), "no policy is set: every command is allowed (fleetmux policy set FILE)")
					return nil
				}
				fmt.Fprintf(c.ErrOrStderr(), "# policy version %d\n", pi.Version)
				_, err := io.WriteString(w, pi.Document)
				return err
			})
		},
	}
	o.register(c, true)
	return c
}

func policyRmCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:     "rm",
		Aliases: []string{"clear"},
		Short:   "Remove the policy: every command is allowed again",
		Args:    exactArgs("policy rm", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			pi, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.PolicyInfo, error) {
				return cl.DeletePolicy(ctx)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				if pi.Version == 0 {
					_, err := fmt.Fprintln(w, "no policy was set")
					return err
				}
				_, err := fmt.Fprintf(w, "policy version %d removed: every command is allowed\n", pi.Version)
				return err
			})
		},
	}
	o.register(c, true)
	return c
}
