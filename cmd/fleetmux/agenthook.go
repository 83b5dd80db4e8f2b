package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fleetmux/fleetmux/agent"
	"github.com/spf13/cobra"
)

// agentHookCmd is `fleetmux agent-hook DIR`, the program the per-agent Claude Code
// settings run for every hook event: it hands the event (stdin) to the node over
// the agent's hook channel in DIR (package agent) and prints the node's answer.
// A PermissionRequest the node cannot be asked about is denied (fail closed);
// other events are dropped (the screen still tells the agent's state).
func agentHookCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "agent-hook DIR",
		Short:  "Report a Claude Code hook event to the node (run by the agent's settings)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			defer stop()
			return runAgentHook(ctx, args[0], c.InOrStdin(), c.OutOrStdout())
		},
	}
}

func runAgentHook(ctx context.Context, dir string, stdin io.Reader, stdout io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	event, err := io.ReadAll(io.LimitReader(stdin, agent.MaxHookEvent+1))
	if err != nil {
		return err
	}
	ev, perr := agent.ParseHookEvent(event)
	out, err := agent.SendHook(ctx, dir, event)
	if err != nil {
		if perr == nil && ev.Name == "PermissionRequest" {
			_, werr := stdout.Write(agent.PermissionAnswer(false, "fleetmux could not ask the node about this tool use: denied"))
			return werr
		}
		fmt.Fprintln(os.Stderr, "fleetmux agent-hook:", err)
		return nil
	}
	_, err = stdout.Write(out)
	return err
}
