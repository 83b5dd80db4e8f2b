package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/fleetmux/fleetmux/api"
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=v0.1.0".
var version = ""

// run runs the command line args (without the program name) and returns the error to
// report; exitCode turns it into the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runIO(ctx, args, nil, stdout, stderr)
}

// runIO is run with a stdin of its own (nil: the process's). The SSH front door
// runs its verbs with sshRun instead, never with this tree.
func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := cliRoot()
	setupRoot(root, args, stdin, stdout, stderr)
	return execute(ctx, root, args)
}

// execute runs root with args; an error of a verb run with --json reports as JSON
// (also when the command line failed to parse after --json).
func execute(ctx context.Context, root *cobra.Command, args []string) error {
	c, err := root.ExecuteContextC(ctx)
	if err == nil || c == nil || c.Flags().Lookup("json") == nil {
		return err
	}
	if c.Flags().Lookup("json").Value.String() == "true" {
		return &jsonError{err: err}
	}
	for _, a := range args {
		switch a {
		case "--":
			return err
		case "--json", "--json=true", "--json=1":
			return &jsonError{err: err}
		}
	}
	return err
}

// cliRoot is the CLI's command tree.
func cliRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "fleetmux",
		Short: "A terminal multiplexer for fleets of machines, built for AI agents",
		Long: "fleetmux keeps persistent PTY sessions on many machines and gives each command\n" +
			"back as one clean block: its output and its exit code.\n\n" +
			"fleetmux dev starts everything on this machine (NATS, a controller, a node); then,\n" +
			"from any directory: fleetmux new, fleetmux run NODE/ID -- CMD, fleetmux attach\n" +
			"NODE/ID. Client verbs talk to a controller's HTTP API at --addr and --token, else\n" +
			"$FLEETMUX_ADDR and $FLEETMUX_TOKEN, else the address and token fleetmux dev wrote\n" +
			"to dev.json. --json prints the API's JSON. fleetmux mcp serves MCP over stdio for\n" +
			"AI agents; fleetmux try runs commands in a local session, without any server.\n\n" +
			"Exit status of the client verbs: 0 done; 1 the controller refused or failed the\n" +
			"request (not found, denied, held, busy, forbidden…); 2 a bad command line; 130\n" +
			"interrupted; 255 no answer from the controller (unreachable, a broken reply).\n" +
			"run and exec exit like ssh instead: the command's code, 124 still running, 254\n" +
			"exit code unknown, 255 any failure of fleetmux. Under --json an error is JSON on\n" +
			"stderr too: {\"error\": {\"code\": …, \"message\": …}}.",
		SilenceErrors: true, // report prints errors, once
		SilenceUsage:  true,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("unknown command %q (see fleetmux --help)", args[0])
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	root.AddCommand(versionCmd(), tryCmd())
	root.AddCommand(replayCmd(), streamCmd())
	root.AddCommand(nodeCmd(), controllerCmd(), devCmd(), enrollCmd(), holderCmd(), agentHookCmd())
	root.AddCommand(clientCmds()...)
	root.AddCommand(mcpCmd(), tokenCmd(), policyCmd(), secretCmd(), uiCmd(), agentCmd())
	root.AddCommand(execCmd(), digestCmd())
	root.AddCommand(genDocsCmd(), completionCmd())
	return root
}

// setupRoot gives a root command its arguments, its I/O (stdin nil: the
// process's) and the CLI's error conventions.
func setupRoot(root *cobra.Command, args []string, stdin io.Reader, stdout, stderr io.Writer) {
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetArgs(args)
	root.SetOut(stdout)
	if stdin != nil {
		root.SetIn(stdin)
	}
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		prefix := ""
		if c.HasParent() {
			prefix = c.Name() + ": "
		}
		return usageError("%s%v (see %s --help)", prefix, err, c.CommandPath())
	})
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(c.OutOrStdout(), "fleetmux %s (protocol %d, %s %s/%s)\n",
				buildVersion(), api.ProtocolVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return api.DevVersion
}
