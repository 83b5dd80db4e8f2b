package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// tokenCmd is `fleetmux token create|ls|revoke`: the API tokens (admin).
func tokenCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "token create|ls|revoke",
		Short: "Manage API tokens (admin)",
		Long: "An API token carries a role (viewer: read and watch; operator: also create\n" +
			"sessions, run and type; admin: everything). Tokens are stored hashed in the\n" +
			"FLEETMUX_TOKENS bucket, so every controller accepts them, and a revoked or\n" +
			"expired token is refused by all of them at once. The secret is printed once, by\n" +
			"create: give it to its user through FLEETMUX_TOKEN (never a flag).",
		Args: exactArgs("token", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(tokenCreateCmd(), tokenLsCmd(), tokenRevokeCmd())
	return c
}

type tokenCreateOptions struct {
	clientOptions
	name, role string
	ttl        time.Duration
}

func tokenCreateCmd() *cobra.Command {
	var o tokenCreateOptions
	c := &cobra.Command{
		Use:     "create --name NAME --role viewer|operator|admin [--ttl 24h]",
		Short:   "Create an API token and print it (once)",
		Long:    "create makes a token and prints it alone on stdout; nothing shows it again.",
		Example: "  fleetmux token create --name ci --role operator --ttl 720h\n  FLEETMUX_TOKEN=$(fleetmux token create --name agent --role operator) fleetmux mcp",
		Args:    exactArgs("token create", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			if o.name == "" || o.role == "" {
				return usageError("token create: --name and --role are required")
			}
			if o.ttl < 0 {
				return usageError("token create: --ttl %v: want a positive duration", o.ttl)
			}
			req := api.TokenRequest{Name: o.name, Role: o.role}
			if o.ttl > 0 {
				req.TTL = o.ttl.String()
			}
			nt, raw, err := apiCall(c.Context(), &o.clientOptions, func(ctx context.Context, cl *client.Client) (api.NewToken, error) {
				return cl.CreateToken(ctx, req)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, nt.Secret)
				return err
			})
		},
	}
	o.register(c, true)
	f := c.Flags()
	f.StringVar(&o.name, "name", "", "the token's name (A-Z a-z 0-9 _ -): it names its holder in the audit")
	f.StringVar(&o.role, "role", "", "viewer, operator or admin")
	f.DurationVar(&o.ttl, "ttl", 0, "lifetime, e.g. 24h (default: until revoked)")
	return c
}

func tokenLsCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:   "ls",
		Short: "List the API tokens (never their secrets)",
		Args:  exactArgs("token ls", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			l, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.TokenList, error) {
				return cl.Tokens(ctx)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printTokens(w, l.Tokens) })
		},
	}
	o.register(c, true)
	return c
}

// printTokens prints the table of `fleetmux token ls`.
func printTokens(w io.Writer, tokens []api.Token) error {
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tROLE\tEXPIRES\tCREATED\tBY")
	for _, t := range tokens {
		exp := "never"
		if t.ExpiresAt != nil {
			exp = t.ExpiresAt.Format(time.RFC3339)
			if !time.Now().Before(*t.ExpiresAt) {
				exp += " (expired)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Role, exp, t.CreatedAt.Format(time.RFC3339), cell(t.CreatedBy, 40))
	}
	return tw.Flush()
}

func tokenRevokeCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke an API token: every controller refuses it from now",
		Args:  exactArgs("token revoke", 1, "token name"),
		RunE: func(c *cobra.Command, args []string) error {
			t, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.Token, error) {
				return cl.RevokeToken(ctx, args[0])
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "revoked %s\n", t.Name)
				return err
			})
		},
	}
	o.register(c, true)
	return c
}
