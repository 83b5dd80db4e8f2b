package main

import (
	"context"
	"fmt"
	"io"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

func takeOverCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:   "take-over NODE/ID",
		Short: "Take a session's writer lease over (operator or admin)",
		Long: "One writer per session at a time: run, send and keys take a short writer lease,\n" +
			"and others get busy naming the holder. take-over gives the lease to you whoever\n" +
			"holds it, and tells the writer that held it (a notice in their SSH attach). It\n" +
			"prints who held it (--json: the session and the previous writer).",
		Example: "  fleetmux take-over web-1/s3",
		Args:    exactArgs("take-over", 1, "session address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("take-over", args)
			if err != nil {
				return err
			}
			t, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.TakeOver, error) {
				return cl.TakeOver(ctx, node, id)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				if t.Previous == nil {
					_, err := fmt.Fprintf(w, "%s/%s: the writer lease is yours (nobody held it)\n", node, id)
					return err
				}
				_, err := fmt.Fprintf(w, "%s/%s: the writer lease is yours (taken from %s)\n", node, id, t.Previous.Name())
				return err
			})
		},
	}
	o.register(c, true)
	return c
}
