package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/charmbracelet/x/term"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// secretCmd is `fleetmux secret set|ls|rm`: secrets a node types at a password
// prompt (DESIGN.md "Guardrails", sudo without handing out the password).
func secretCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "secret set NODE NAME|ls NODE|rm NODE NAME",
		Short: "Store, list or remove a node's secrets (sudo without handing out the password)",
		Long: "An admin stores a secret on one node (DIR/secrets/NAME, 0600); a policy entry\n" +
			"(secrets: [{name: NAME, roles: [operator]}]) says whose commands may have the\n" +
			"node type it at a sudo password prompt. The node never sends it back: ls lists\n" +
			"names only, and no reply, stream, recording or audit record holds it. Admin only.",
		Args: exactArgs("secret", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(secretSetCmd(), secretLsCmd(), secretRmCmd())
	return c
}

func secretSetCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:   "set NODE NAME",
		Short: "Store a secret on a node, read from the terminal (echo off) or stdin",
		Long: "set reads the secret from the terminal with echo off, or from stdin when it is\n" +
			"not a terminal (one line: its line end is dropped); never from a flag or an\n" +
			"argument, which other users see in ps. It replaces a secret of that name.",
		Example: "  fleetmux secret set web-1 sudo-deploy\n  fleetmux secret set web-1 sudo-deploy < pw.txt",
		Args:    exactArgs("secret set", 2, "NODE and the secret's NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			node, name := args[0], args[1]
			for what, v := range map[string]string{"node": node, "secret name": name} {
				if err := api.ValidName(v); err != nil {
					return usageError("secret set: %s: %v", what, err)
				}
			}
			value, err := readSecret(c.InOrStdin(), c.ErrOrStderr(), "secret "+name+" for node "+node+": ")
			if err != nil {
				return usageError("secret set: %v", err)
			}
			info, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.SecretInfo, error) {
				return cl.SetSecret(ctx, node, name, string(value))
			})
			clear(value)
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "secret %s stored on %s\n", info.Name, info.Node)
				return err
			})
		},
	}
	o.register(c, true)
	return c
}

// readSecret reads a secret: from a terminal on in with echo off (prompting on
// prompt to w), or else one line of in.
func readSecret(in io.Reader, w io.Writer, prompt string) ([]byte, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(f.Fd()) {
		fmt.Fprint(w, prompt)
		b, err := term.ReadPassword(f.Fd())
		fmt.Fprintln(w)
		if err != nil {
			return nil, fmt.Errorf("reading the secret: %w", err)
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(in, api.MaxSecretBytes+3))
	if err != nil {
		return nil, fmt.Errorf("reading the secret from stdin: %w", err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if err := api.ValidSecret(string(b)); err != nil {
		clear(b)
		return nil, err
	}
	return b, nil
}

func secretLsCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:     "ls NODE",
		Short:   "List the names of a node's secrets (never their values)",
		Example: "  fleetmux secret ls web-1",
		Args:    exactArgs("secret ls", 1, "NODE"),
		RunE: func(c *cobra.Command, args []string) error {
			l, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.SecretList, error) {
				return cl.Secrets(ctx, args[0])
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tUPDATED")
				for _, s := range l.Secrets {
					fmt.Fprintf(tw, "%s\t%s\n", api.Printable(s.Name), s.UpdatedAt.Format("2006-01-02 15:04:05Z"))
				}
				return tw.Flush()
			})
		},
	}
	o.register(c, true)
	return c
}

func secretRmCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:     "rm NODE NAME",
		Short:   "Remove a secret from a node",
		Example: "  fleetmux secret rm web-1 sudo-deploy",
		Args:    exactArgs("secret rm", 2, "NODE and the secret's NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			info, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.SecretInfo, error) {
				return cl.DeleteSecret(ctx, args[0], args[1])
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "secret %s removed from %s\n", info.Name, info.Node)
				return err
			})
		},
	}
	o.register(c, true)
	return c
}
