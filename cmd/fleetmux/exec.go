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

// execCmd is `fleetmux exec NODE -- ARGV…` (DESIGN "Exec"): a one-shot process
// on a node without a terminal, its stdout to stdout and its stderr to stderr,
// exiting like the command, as `ssh host cmd` does.
func execCmd() *cobra.Command {
	var o clientOptions
	var r api.ExecRequest
	var env []string
	var timeout time.Duration
	var command string
	var withStdin bool
	c := &cobra.Command{
		Use:   "exec NODE [flags] -- ARGV…",
		Short: "Run a one-shot process on a node without a terminal, stdout and stderr apart",
		Long: "exec runs ARGV on NODE as it is (or -c CMD under sh -c), without a PTY: TERM=dumb,\n" +
			"NO_COLOR=1, PAGER=cat, stdin /dev/null unless --stdin passes this one's. Its stdout\n" +
			"goes to stdout and its stderr to stderr, and exec exits like the command: its exit\n" +
			"code (128+N for signal N); 124 when --timeout passed and it was killed (its output\n" +
			"so far is printed); 255 when fleetmux itself failed (unreachable, refused, denied).\n" +
			"Each stream is cut to its head and tail past --max-output-bytes, saying how much\n" +
			"was left out. The node's policy decides it before it starts. --background leaves\n" +
			"it running past --timeout and prints NODE/EXEC_ID (GET /v1/exec/NODE/EXEC_ID); a\n" +
			"background exec outlives a restart of the node agent (docs/exec.md).",
		Example: "  fleetmux exec web-1 -- uname -a\n" +
			"  fleetmux exec web-1 -c 'make test 2>&1 | tail -5' --timeout 10m\n" +
			"  echo hello | fleetmux exec web-1 --stdin -- tr a-z A-Z",
		Args: func(c *cobra.Command, args []string) error {
			dash := c.ArgsLenAtDash()
			switch {
			case len(args) == 0 || dash == 0:
				return usageError("exec: want NODE (see fleetmux exec --help)")
			case dash > 1 || dash < 0 && len(args) > 1:
				return usageError("exec: put the program after -- (fleetmux exec NODE -- ARGV…)")
			case command != "" && len(args) > 1:
				return usageError("exec: give -c CMD or -- ARGV…, not both")
			case command == "" && len(args) < 2:
				return usageError("exec: want a program: fleetmux exec NODE -- ARGV… (or -c CMD)")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			r.Node = args[0]
			if err := api.ValidName(r.Node); err != nil {
				return usageError("exec: node: %s", nameErr(err))
			}
			r.Argv, r.Command = args[1:], command
			var err error
			if r.Env, err = parsePairs("env", env); err != nil {
				return err
			}
			if timeout < 0 {
				return usageError("exec: --timeout must not be negative")
			}
			r.TimeoutMS = int(timeout / time.Millisecond)
			if withStdin {
				b, err := io.ReadAll(io.LimitReader(c.InOrStdin(), api.MaxExecStdinBytes+1))
				if err != nil {
					return ownFailure(fmt.Errorf("exec: reading stdin: %w", err))
				}
				if len(b) > api.MaxExecStdinBytes {
					return usageError("exec: stdin over %d bytes", api.MaxExecStdinBytes)
				}
				s := string(b)
				r.Stdin = &s
			}
			res, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.ExecResult, error) {
				return cl.Exec(ctx, r)
			})
			if err != nil {
				return ownFailure(err)
			}
			if o.json {
				if err := printJSON(c.OutOrStdout(), raw); err != nil {
					return ownFailure(err)
				}
			} else if r.Background && res.State == api.ExecRunning {
				_, err := fmt.Fprintln(c.OutOrStdout(), res.Node+"/"+res.ExecID)
				return ownFailure(err)
			} else {
				if _, err := io.WriteString(c.OutOrStdout(), res.Stdout); err != nil {
					return ownFailure(err)
				}
				if _, err := io.WriteString(c.ErrOrStderr(), res.Stderr); err != nil {
					return ownFailure(err)
				}
			}
			return execExit(res, timeout)
		},
	}
	f := c.Flags()
	f.StringVarP(&command, "command", "c", "", "run CMD under sh -c instead of ARGV")
	f.StringVar(&r.Cwd, "cwd", "", "its working directory on the node (default: the node's home)")
	f.StringArrayVar(&env, "env", nil, "KEY=VALUE in its environment (repeatable)")
	f.DurationVar(&timeout, "timeout", api.DefaultExecTimeout, "how long it may run before it is killed (with --background: before exec returns)")
	f.IntVar(&r.MaxOutputBytes, "max-output-bytes", 0, "cap of each stream (head and tail kept; default 64 KiB)")
	f.BoolVar(&withStdin, "stdin", false, "pass this command's stdin (up to 256 KiB) to the process")
	f.BoolVar(&r.Background, "background", false, "leave it running past --timeout; print NODE/EXEC_ID")
	o.register(c, true)
	return c
}

// execExit is how `fleetmux exec` exits for res: its exit code; 124 when its
// timeout passed; 0 for a background exec still running.
func execExit(res api.ExecResult, timeout time.Duration) error {
	switch {
	case res.State == api.ExecRunning:
		return nil
	case res.TimedOut:
		return &exitError{code: exitStillRunning, err: fmt.Errorf("exec %s/%s: killed after --timeout %v", res.Node, res.ExecID, timeout)}
	case res.ExitCode == nil:
		return &exitError{code: exitCodeUnknown, err: fmt.Errorf("exec %s/%s: no exit code", res.Node, res.ExecID)}
	case *res.ExitCode == 0:
		return nil
	}
	return &exitError{code: *res.ExitCode}
}
