package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// agentCmd is `fleetmux agent spawn|ls|send|wait|logs|interrupt|kill` (DESIGN.md
// "Agents"): coding agents run as sessions and tracked by their drivers.
func agentCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "agent spawn|ls|send|wait|logs|interrupt|kill",
		Short: "Run and supervise coding agents (Claude Code, Codex, OpenCode, …) on the fleet",
		Long: "An agent is a session whose program is a coding-agent CLI run by a driver\n" +
			"(claude, codex, opencode, gemini, aider, or generic with a rule file). The node\n" +
			"tracks its state: booting, ready, working, waiting_permission, waiting_input,\n" +
			"done, error or exited, each with its source (hook, stream, screen, process) and\n" +
			"the evidence. It is a session too: screen, attach and logs work on NODE/ID.",
		Args: exactArgs("agent", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(agentSpawnCmd(), agentLsCmd(), agentSendCmd(), agentWaitCmd(), agentLogsCmd(), agentInterruptCmd(), agentKillCmd())
	return c
}

func agentSpawnCmd() *cobra.Command {
	var o clientOptions
	var r api.SpawnRequest
	var env, secrets, labels []string
	var rules string
	c := &cobra.Command{
		Use:   "spawn [NODE] --driver DRIVER [flags] [-- ARGS…]",
		Short: "Start a coding agent on a node; prints its address NODE/ID",
		Long: "spawn starts the driver's CLI (found on the node's PATH, or --program) in a new\n" +
			"session on NODE (default: the controller's choice) and prints the agent's address.\n" +
			"--prompt is sent once it is first ready. --parent makes it a child of another\n" +
			"agent: at most 10 children per agent and 2 levels deep. ARGS after -- go to the\n" +
			"program. --rules FILE is the generic driver's rule file (see docs/agents.md).",
		Example: "  fleetmux agent spawn web-1 --driver claude --cwd /srv/app --prompt \"fix the tests\"\n" +
			"  fleetmux agent spawn --driver generic --program mytui --rules mytui.rules",
		Args: func(c *cobra.Command, args []string) error {
			if n := c.ArgsLenAtDash(); n > 1 || n < 0 && len(args) > 1 {
				return usageError("agent spawn: want at most one NODE before -- (see fleetmux agent spawn --help)")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			dash := c.ArgsLenAtDash()
			if dash < 0 {
				dash = len(args)
			}
			if dash == 1 {
				r.Node = args[0]
				if err := api.ValidName(r.Node); err != nil {
					return usageError("agent spawn: node: %s", nameErr(err))
				}
			}
			r.Args = args[dash:]
			if r.Driver == "" {
				return usageError("agent spawn: --driver is required: one of %s", strings.Join(api.Drivers, ", "))
			}
			var err error
			if r.Env, err = parsePairs("env", env); err != nil {
				return err
			}
			if r.Secrets, err = parsePairs("secret", secrets); err != nil {
				return err
			}
			if r.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			if rules != "" {
				b, err := os.ReadFile(rules)
				if err != nil {
					return usageError("agent spawn: --rules: %v", err)
				}
				r.Rules = string(b)
			}
			a, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.Agent, error) {
				return cl.SpawnAgent(ctx, r)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, a.Address())
				return err
			})
		},
	}
	f := c.Flags()
	f.StringVar(&r.Driver, "driver", "", "claude, codex, opencode, gemini, aider or generic")
	f.StringVar(&r.Cwd, "cwd", "", "its working directory on the node")
	f.StringVar(&r.Prompt, "prompt", "", "the first prompt, sent once it is ready")
	f.StringVar(&r.Parent, "parent", "", "the agent NODE/ID that spawns it")
	f.StringVar(&r.Program, "program", "", "the CLI to run (default: the driver's, on the node's PATH)")
	f.StringVar(&rules, "rules", "", "the generic driver's rule file")
	f.StringArrayVar(&env, "env", nil, "KEY=VALUE in its environment (repeatable)")
	f.StringArrayVar(&secrets, "secret", nil, "ENVVAR=NAME: a node secret in its environment (repeatable)")
	f.StringArrayVar(&labels, "label", nil, "KEY=VALUE label (repeatable)")
	o.register(c, true)
	return c
}

func agentLsCmd() *cobra.Command {
	var o clientOptions
	var node string
	c := &cobra.Command{
		Use:   "ls [--node NODE]",
		Short: "List the agents, children under their parents",
		Long: "ls lists the agents fleet-wide (or of --node): address, driver, state, where the\n" +
			"state came from and since when, and the evidence (a hook's event, or the screen\n" +
			"rule and the line it matched). A child is listed under its parent.",
		Example: "  fleetmux agent ls\n  fleetmux agent ls --json",
		Args:    exactArgs("agent ls", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			if node != "" {
				if err := api.ValidName(node); err != nil {
					return usageError("agent ls: --node: %s", nameErr(err))
				}
			}
			l, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.AgentList, error) {
				return cl.Agents(ctx, node)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printAgents(w, l) })
		},
	}
	c.Flags().StringVar(&node, "node", "", "only this node's agents")
	o.register(c, true)
	return c
}

// printAgents prints the agents as a tree: roots first, each child indented under
// its parent.
func printAgents(w io.Writer, l api.AgentList) error {
	tw := table(w)
	fmt.Fprintln(tw, "AGENT\tDRIVER\tSTATE\tSOURCE\tSINCE\tEVIDENCE")
	listed := map[string]bool{}
	for _, a := range l.Agents {
		listed[a.Address()] = true
	}
	kids := map[string][]api.Agent{}
	var roots []api.Agent
	for _, a := range l.Agents {
		if listed[a.Parent] {
			kids[a.Parent] = append(kids[a.Parent], a)
		} else {
			roots = append(roots, a)
		}
	}
	now := time.Now()
	var walk func(a api.Agent, indent string)
	walk = func(a api.Agent, indent string) {
		since := now.Sub(a.StateSince).Round(time.Second).String()
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\n", indent, cell(a.Address(), 40), a.Driver, a.State, a.StateSource, since, cell(a.Evidence, 60))
		if len(indent) > 8 {
			return // deeper than any tree may grow
		}
		for _, k := range kids[a.Address()] {
			walk(k, indent+"  ")
		}
	}
	for _, a := range roots {
		walk(a, "")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(l.Unavailable) > 0 {
		fmt.Fprintf(w, "(nodes that did not answer: %v)\n", l.Unavailable)
	}
	return nil
}

func agentSendCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:     "send NODE/ID TEXT…",
		Short:   "Send an agent a prompt (typed, then Enter)",
		Long:    "send types the words (joined by spaces) into the agent and submits them.\nIt does not wait: use fleetmux agent wait.",
		Example: "  fleetmux agent send web-1/s4 \"now run the linter\"",
		Args:    minArgs("agent send", 2, "agent address NODE/ID and the prompt"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("agent send", args)
			if err != nil {
				return err
			}
			text := strings.Join(args[1:], " ")
			a, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.Agent, error) {
				return cl.SendAgent(ctx, node, id, text)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printAgentState(w, a) })
		},
	}
	o.register(c, true)
	return c
}

// printAgentState prints "NODE/ID STATE (SOURCE: EVIDENCE)".
func printAgentState(w io.Writer, a api.Agent) error {
	line := a.Address() + " " + a.State
	if a.StateSource != "" {
		line += " (" + a.StateSource
		if a.Evidence != "" {
			line += ": " + api.OneLine(a.Evidence, 120)
		}
		line += ")"
	}
	_, err := fmt.Fprintln(w, api.Printable(line))
	return err
}

func agentWaitCmd() *cobra.Command {
	var o clientOptions
	var state string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "wait NODE/ID… [--state ready[,done,…]] [--timeout 60s]",
		Short: "Wait until agents are in a state; prints each as it gets there",
		Long: "wait waits on every agent named at once and prints a line for each as soon as\n" +
			"it is in one of --state (default: ready or ended). It exits 0 when all got\n" +
			"there, 124 when --timeout passed first for any, 1 on an error.",
		Example: "  fleetmux agent wait web-1/s4 web-2/s7 --state ready --timeout 2m",
		Args:    minArgs("agent wait", 1, "agent address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			states, err := api.ParseAgentStates(state)
			if err != nil {
				return usageError("agent wait: --state: %s", err.(*api.Error).Message)
			}
			ms, err := durationMS("agent wait", timeout)
			if err != nil {
				return err
			}
			type target struct{ node, id string }
			var targets []target
			for _, a := range args {
				node, id, err := parseAddress("agent wait", a)
				if err != nil {
					return err
				}
				targets = append(targets, target{node, id})
			}
			cl, err := o.client()
			if err != nil {
				return err
			}
			var mu sync.Mutex // one line at a time, and the first error
			var first error
			missed := 0
			var wg sync.WaitGroup
			for _, t := range targets {
				wg.Add(1)
				go func() { // joined below
					defer wg.Done()
					ctx, raw := c.Context(), []byte(nil)
					if o.json {
						ctx = client.CaptureReply(ctx, &raw)
					}
					r, err := cl.WaitAgent(ctx, t.node, t.id, states, ms)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						if first == nil {
							first = o.fail(err)
						}
						return
					}
					if !r.OK {
						missed++
					}
					if err := o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printAgentState(w, r.Agent) }); err != nil && first == nil {
						first = err
					}
				}()
			}
			wg.Wait()
			if first != nil {
				return first
			}
			if missed > 0 {
				return &exitError{code: 124, err: fmt.Errorf("agent wait: %d of %d agents not %s after %v", missed, len(targets), orDash(state), timeout)}
			}
			return nil
		},
	}
	c.Flags().StringVar(&state, "state", "", "comma-separated states (default ready,done,error,exited)")
	c.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "how long to wait")
	o.register(c, true)
	return c
}

func agentLogsCmd() *cobra.Command {
	var o clientOptions
	var cursor int64
	var screen bool
	c := &cobra.Command{
		Use:   "logs NODE/ID [--cursor N] [--screen]",
		Short: "Print what an agent printed, as text (or its screen now)",
		Long: "logs prints the agent's output since --cursor as plain lines (head and tail of\n" +
			"the latest 64 KiB at most), and on stderr the cursor to pass next time; with\n" +
			"--screen, its screen as it is now.",
		Example: "  fleetmux agent logs web-1/s4\n  fleetmux agent logs web-1/s4 --cursor 18233",
		Args:    exactArgs("agent logs", 1, "agent address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("agent logs", args)
			if err != nil {
				return err
			}
			if cursor < 0 {
				return usageError("agent logs: --cursor %d: cursors are not negative", cursor)
			}
			out, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.AgentOutput, error) {
				return cl.AgentOutput(ctx, node, id, cursor, 0)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				text := out.Text
				if screen {
					text = out.Screen
				}
				if err := writeText(w, api.Printable(text)); err != nil {
					return err
				}
				_, err := fmt.Fprintf(c.ErrOrStderr(), "(cursor %d)\n", out.Cursor)
				return err
			})
		},
	}
	c.Flags().Int64Var(&cursor, "cursor", 0, "the cursor of the last read (0: from the start)")
	c.Flags().BoolVar(&screen, "screen", false, "print the screen instead")
	o.register(c, true)
	return c
}

// agentActCmd is interrupt or kill: one call on one agent, its state printed.
func agentActCmd(verb, short, long string, do func(ctx context.Context, cl *client.Client, node, id string) (api.Agent, error)) *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:     verb + " NODE/ID",
		Short:   short,
		Long:    long,
		Example: "  fleetmux agent " + verb + " web-1/s4",
		Args:    exactArgs("agent "+verb, 1, "agent address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("agent "+verb, args)
			if err != nil {
				return err
			}
			a, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.Agent, error) {
				return do(ctx, cl, node, id)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printAgentState(w, a) })
		},
	}
	o.register(c, true)
	return c
}

func agentInterruptCmd() *cobra.Command {
	return agentActCmd("interrupt", "Interrupt an agent's work (Esc or Ctrl-C, as its CLI wants)",
		"interrupt sends the agent's driver's interrupt keys: it stops what it works on\nand is ready again.",
		func(ctx context.Context, cl *client.Client, node, id string) (api.Agent, error) {
			return cl.InterruptAgent(ctx, node, id)
		})
}

func agentKillCmd() *cobra.Command {
	return agentActCmd("kill", "End an agent and its children",
		"kill ends the agent's session, and first those of its children on every node.\nIts owner or an admin may.",
		func(ctx context.Context, cl *client.Client, node, id string) (api.Agent, error) {
			return cl.KillAgent(ctx, node, id)
		})
}
