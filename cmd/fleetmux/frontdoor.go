package main

import (
	"context"
	"io"

	"github.com/fleetmux/fleetmux/sshd"
	"github.com/spf13/cobra"
)

// sshRun runs one verb for the SSH front door. Its command tree holds the client
// verbs the front door allows (sshd.Verb) and help, nothing else: no
// server verbs, try, replay or mcp, whose flags and defaults belong to this
// process. The verbs act through fd alone (see clientOptions.resolve), and their
// --addr, --token and --actor flags are hidden: the front door sets them.
func sshRun(ctx context.Context, fd frontDoor, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := &cobra.Command{
		Use:   "fleetmux",
		Short: "The fleetmux SSH front door",
		Long: "Verbs of the fleetmux SSH front door, run as `ssh -p PORT HOST VERB ARGS`: they\n" +
			"print and exit as the fleetmux CLI does. `attach NODE/ID` (with ssh -t) attaches\n" +
			"to a session, `ssh -t -p PORT HOST` opens the session menu. Your key's role\n" +
			"(viewer, operator, admin) decides which verbs you may run.",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("unknown command %q (see help)", args[0])
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	setupRoot(root, args, stdin, stdout, stderr)
	for _, c := range clientCmds() {
		if !sshd.Verb(c.Name()) || c.Name() == "attach" { // the front door attaches itself
			continue
		}
		for _, f := range []string{"addr", "token", "actor"} {
			c.Flags().MarkHidden(f)
		}
		root.AddCommand(c)
	}
	return execute(withFrontDoor(ctx, fd), root, args)
}
