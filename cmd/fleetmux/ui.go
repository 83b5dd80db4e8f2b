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

// uiCmd is `fleetmux ui`: a one-time link that signs a browser in to the
// controller's web console as the CLI's token. It is not a verb of the SSH front
// door: a link acts with the token that made it.
func uiCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:   "ui",
		Short: "Print a one-time link that signs a browser in to the web console",
		Long: "ui asks the controller for a one-time sign-in link to its web console (/ui/)\n" +
			"and prints it. Opening it signs the browser in with the role of the token the\n" +
			"CLI uses (the session cookie lasts 12 hours at most, or less when the token\n" +
			"expires or is revoked). The link works once, within a minute; its code is in\n" +
			"the URL's fragment, which no server log sees. The token itself never goes to\n" +
			"the browser. Or sign in on the console's page with an API token.",
		Example: "  fleetmux ui\n  fleetmux ui --addr http://ctl:7070",
		Args:    exactArgs("ui", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			var base string
			l, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.ConsoleLink, error) {
				base = cl.Addr()
				return cl.ConsoleLink(ctx)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "%s%s\n(one use, valid until %s)\n", base, l.Path, l.ExpiresAt.Local().Format(time.TimeOnly))
				return err
			})
		},
	}
	o.register(c, true)
	return c
}
