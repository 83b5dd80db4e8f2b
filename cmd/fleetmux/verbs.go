package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// The client verbs that make one API call and print its reply. run (and fan-out)
// is in fanout.go, attach in attach.go.

// exactArgs wants exactly n arguments, the first of them a session address when
// what names them; extra or missing ones are usage errors.
func exactArgs(verb string, n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		switch {
		case len(args) < n:
			return usageError("%s: missing %s (see fleetmux %s --help)", verb, what, verb)
		case len(args) > n && n == 0:
			return usageError("%s: takes no arguments, got %q (see fleetmux %s --help)", verb, args[0], verb)
		case len(args) > n:
			return usageError("%s: unexpected argument %q: want %s (see fleetmux %s --help)", verb, args[n], what, verb)
		}
		return nil
	}
}

// minArgs wants at least n arguments.
func minArgs(verb string, n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < n {
			return usageError("%s: missing %s (see fleetmux %s --help)", verb, what, verb)
		}
		return nil
	}
}

// table returns a tabwriter for a table with two spaces between columns.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// cell makes s safe for a table cell: one line, no tabs, no control characters
// (api.Printable: a title must not clear or reprogram the reader's terminal).
func cell(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\r' {
			return ' '
		}
		return r
	}, s)
	return orDash(api.Clip(api.Printable(api.OneLine(s, n)), n))
}

func nodesCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:   "nodes",
		Short: "List the nodes the controller knows",
		Long: "nodes lists the nodes the controller has found through gossip: their status\n" +
			"(alive, suspect, disconnected, dead, left), session count, version, gossip address and labels.",
		Example: "  fleetmux nodes\n  fleetmux nodes --json",
		Args:    exactArgs("nodes", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			l, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.NodeList, error) {
				return cl.Nodes(ctx)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printNodes(w, l.Nodes) })
		},
	}
	o.register(c, true)
	return c
}

// printNodes prints the table of `fleetmux nodes`, sorted by name.
func printNodes(w io.Writer, nodes []api.Node) error {
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b api.Node) int { return strings.Compare(a.Name, b.Name) })
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tSTATUS\tSESSIONS\tVERSION\tADDR\tLABELS")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", api.Printable(n.Name), cell(n.Status, 20), n.Sessions, cell(n.Version, 20), cell(n.Addr, 40), labelString(n.Labels))
	}
	return tw.Flush()
}

type lsOptions struct {
	clientOptions
	node   string
	labels []string
}

func lsCmd() *cobra.Command {
	var o lsOptions
	c := &cobra.Command{
		Use:   "ls [--node NODE] [--label k=v]...",
		Short: "List sessions fleet-wide",
		Long: "ls lists the sessions of every node (or of --node), with their state, title,\n" +
			"the running command or the last exit code, and the working directory.\n" +
			"--label keeps sessions that have all the given labels. Nodes that do not answer\n" +
			"are named in a warning on stderr; their sessions are missing from the list.",
		Example: "  fleetmux ls\n  fleetmux ls --node web-1\n  fleetmux ls --label role=web --json",
		Args:    exactArgs("ls", 0, ""),
		RunE: func(c *cobra.Command, _ []string) error {
			if o.node != "" {
				if err := api.ValidName(o.node); err != nil {
					return usageError("ls: --node: %s", nameErr(err))
				}
			}
			labels, err := parseLabels(o.labels)
			if err != nil {
				return err
			}
			l, raw, err := apiCall(c.Context(), &o.clientOptions, func(ctx context.Context, cl *client.Client) (api.SessionList, error) {
				return cl.Sessions(ctx, client.SessionFilter{Node: o.node, Labels: labels})
			})
			if err != nil {
				return err
			}
			if len(l.Unavailable) > 0 {
				fmt.Fprintf(c.ErrOrStderr(), "fleetmux: warning: no answer from %s: their sessions are not listed\n", strings.Join(l.Unavailable, ", "))
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printSessions(w, l.Sessions) })
		},
	}
	o.register(c, true)
	c.Flags().StringVar(&o.node, "node", "", "only the sessions of this node")
	c.Flags().StringArrayVar(&o.labels, "label", nil, "only sessions with this label k=v (repeatable: all must match)")
	return c
}

// printAddress prints a session's address NODE/ID alone on a line (new, kill).
func printAddress(w io.Writer, s api.Session) error {
	_, err := fmt.Fprintf(w, "%s/%s\n", s.Node, s.ID)
	return err
}

// printSessions prints the table of `fleetmux ls`.
func printSessions(w io.Writer, ss []api.Session) error {
	tw := table(w)
	fmt.Fprintln(tw, "ADDRESS\tSTATE\tTITLE\tCMD/LAST-EXIT\tCWD")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", api.Printable(s.Node+"/"+s.ID), cell(s.State, 20), cell(s.Title, 30), cmdOrExit(s), cell(s.Cwd, 60))
	}
	return tw.Flush()
}

// cmdOrExit is the CMD/LAST-EXIT cell: the running command, or how the last one (or
// the session) ended.
func cmdOrExit(s api.Session) string {
	switch {
	case s.State == api.StateExited && s.ExitCode != nil:
		return fmt.Sprintf("exited %d", *s.ExitCode)
	case s.State == api.StateExited:
		return api.StateExited
	case s.CurrentCommand != "":
		return cell(s.CurrentCommand, 40)
	case s.LastExitCode != nil:
		return fmt.Sprintf("exit %d", *s.LastExitCode)
	}
	return "-"
}

type newOptions struct {
	clientOptions
	node, title, description, shell, cwd, user string
	sandbox                                    string
	labels, env                                []string
	cols, rows                                 int
}

func newCmd() *cobra.Command {
	var o newOptions
	c := &cobra.Command{
		Use:   "new [--node NODE] [--title T] [--shell bash|zsh] [--cwd DIR] [--user NAME] [--sandbox PROFILE] [--label k=v]... [--env K=V]... [-- ARGV...]",
		Short: "Create a session; prints its address NODE/ID",
		Long: "new starts a session and prints its address NODE/ID alone on stdout, for scripts:\n" +
			"  s=$(fleetmux new --title build)\n\n" +
			"Without --node the controller picks the alive node with the fewest sessions. The\n" +
			"session runs a shell with shell integration (--shell, default the node's), or,\n" +
			"given ARGV after --, that program without it.",
		Example: "  fleetmux new\n" +
			"  fleetmux new --node web-1 --title build --cwd /srv/app --label role=ci\n" +
			"  fleetmux new --node web-1 -- python3 -q",
		RunE: func(c *cobra.Command, args []string) error {
			req, err := o.request(args)
			if err != nil {
				return err
			}
			s, raw, err := apiCall(c.Context(), &o.clientOptions, func(ctx context.Context, cl *client.Client) (api.Session, error) {
				return cl.NewSession(ctx, req)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printAddress(w, s) })
		},
	}
	o.register(c, true)
	f := c.Flags()
	f.StringVar(&o.node, "node", "", "node to create it on (default: the controller picks)")
	f.StringVar(&o.title, "title", "", "title")
	f.StringVar(&o.description, "description", "", "description")
	f.StringVar(&o.shell, "shell", "", "shell with integration: bash or zsh (default: the node's)")
	f.StringVar(&o.cwd, "cwd", "", "working directory on the node")
	f.StringVar(&o.user, "user", "", "run the session as this user of the node (the node agent must run as root): for untrusted workloads")
	f.StringVar(&o.sandbox, "sandbox", "", "run under this sandbox profile of the policy, at least as strict as the one its rules choose (docs/sandbox.md)")
	f.StringArrayVar(&o.labels, "label", nil, "label k=v (repeatable)")
	f.StringArrayVar(&o.env, "env", nil, "environment variable K=V (repeatable)")
	f.IntVar(&o.cols, "cols", 0, "terminal columns (default: the node's)")
	f.IntVar(&o.rows, "rows", 0, "terminal rows (default: the node's)")
	return c
}

// request builds the create request from the flags and ARGV.
func (o *newOptions) request(argv []string) (api.NewSession, error) {
	var req api.NewSession
	if o.node != "" {
		if err := api.ValidName(o.node); err != nil {
			return req, usageError("new: --node: %s", nameErr(err))
		}
	}
	if o.shell != "" && len(argv) > 0 {
		return req, usageError("new: --shell %s and a program (%s) exclude each other: a session runs one of them", o.shell, argv[0])
	}
	if len(argv) > 0 && argv[0] == "" {
		return req, usageError("new: empty program name")
	}
	if o.cols < 0 || o.rows < 0 {
		return req, usageError("new: --cols %d --rows %d: want positive sizes", o.cols, o.rows)
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return req, err
	}
	env, err := parsePairs("env", o.env)
	if err != nil {
		return req, err
	}
	req.Node = o.node
	req.CreateRequest = api.CreateRequest{
		Title: o.title, Description: o.description, Labels: labels, Shell: o.shell,
		Argv: argv, Cwd: o.cwd, Env: env, Cols: o.cols, Rows: o.rows, User: o.user, Sandbox: o.sandbox,
	}
	return req, nil
}

type sendOptions struct {
	clientOptions
	enter bool
}

func sendCmd() *cobra.Command {
	var o sendOptions
	c := &cobra.Command{
		Use:   "send NODE/ID [--enter] TEXT... | -",
		Short: "Type raw text into a session",
		Long: "send types TEXT (the words joined with spaces) into the session as if typed on\n" +
			"its keyboard; --enter adds a newline. With - it types what stdin holds.\n" +
			"To run a command and get its output and exit code, use fleetmux run instead;\n" +
			"for named keys (C-c, Up, Tab…) use fleetmux keys.",
		Example: "  fleetmux send web-1/s3 --enter 'yes'\n" +
			"  printf 'bob\\n' | fleetmux send web-1/s3 -",
		Args: minArgs("send", 1, "session address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("send", args)
			if err != nil {
				return err
			}
			text, err := o.text(args[1:], c.InOrStdin())
			if err != nil {
				return err
			}
			_, raw, err := apiCall(c.Context(), &o.clientOptions, func(ctx context.Context, cl *client.Client) (struct{}, error) {
				return struct{}{}, cl.Input(ctx, node, id, text)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, nil)
		},
	}
	o.register(c, true)
	c.Flags().BoolVar(&o.enter, "enter", false, "append a newline (Enter)")
	return c
}

// text is what send types: the words, or stdin for "-".
func (o *sendOptions) text(words []string, stdin io.Reader) (string, error) {
	var text string
	if len(words) == 1 && words[0] == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, api.MaxBodyBytes/2+1))
		if err != nil {
			return "", fmt.Errorf("send: reading stdin: %w", err)
		}
		if len(b) > api.MaxBodyBytes/2 {
			return "", usageError("send: stdin holds more than %d bytes", api.MaxBodyBytes/2)
		}
		text = string(b)
	} else {
		text = strings.Join(words, " ")
	}
	if o.enter {
		text += "\n"
	}
	if text == "" {
		return "", usageError("send: nothing to send: give TEXT, - for stdin, or --enter")
	}
	return text, nil
}

func keysCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:   "keys NODE/ID KEY...",
		Short: "Send named keys to a session (C-c, Enter, Up, Tab, Esc, F1…)",
		Long: "keys sends named keys in order: C-c (any C-letter), M-x, Enter, Tab, Esc, Space,\n" +
			"BSpace, Up, Down, Left, Right, Home, End, PageUp, PageDown, Delete, F1-F12.",
		Example: "  fleetmux keys web-1/s3 C-c\n  fleetmux keys web-1/s3 Up Enter",
		Args:    minArgs("keys", 2, "session address NODE/ID and at least one KEY"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("keys", args)
			if err != nil {
				return err
			}
			for i, k := range args[1:] {
				if strings.TrimSpace(k) == "" {
					return usageError("keys: key %d is empty", i+1)
				}
			}
			_, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (struct{}, error) {
				return struct{}{}, cl.Keys(ctx, node, id, args[1:]...)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, nil)
		},
	}
	o.register(c, true)
	return c
}

func screenCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:     "screen NODE/ID",
		Short:   "Print a session's current screen as text",
		Long:    "screen prints what the session's terminal shows now, as plain text.\n--json adds the cursor, the alt-screen flag and whether it waits for input.",
		Example: "  fleetmux screen web-1/s3\n  fleetmux screen web-1/s3 --json",
		Args:    exactArgs("screen", 1, "session address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("screen", args)
			if err != nil {
				return err
			}
			s, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.Screen, error) {
				return cl.Screen(ctx, node, id)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return writeText(w, s.Text) })
		},
	}
	o.register(c, true)
	return c
}

func blocksCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:     "blocks NODE/ID",
		Short:   "List a session's blocks (one per command)",
		Long:    "blocks lists the commands run in a session: number, state, exit code, command.\nRead one block's output with fleetmux block NODE/ID N.",
		Example: "  fleetmux blocks web-1/s3",
		Args:    exactArgs("blocks", 1, "session address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("blocks", args)
			if err != nil {
				return err
			}
			l, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.BlockList, error) {
				return cl.Blocks(ctx, node, id)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printBlocks(w, l.Blocks) })
		},
	}
	o.register(c, true)
	return c
}

// printBlocks prints the table of `fleetmux blocks`.
func printBlocks(w io.Writer, bs []api.Block) error {
	tw := table(w)
	fmt.Fprintln(tw, "N\tSTATE\tEXIT\tCOMMAND")
	for _, b := range bs {
		exit := "-"
		if b.ExitCode != nil {
			exit = strconv.Itoa(*b.ExitCode)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", b.N, orDash(b.State), exit, cell(b.Command, 60))
	}
	return tw.Flush()
}

type blockOptions struct {
	clientOptions
	offset, limit, maxBytes int
	grep                    string
}

func blockCmd() *cobra.Command {
	var o blockOptions
	c := &cobra.Command{
		Use:   "block NODE/ID N|last [--offset LINES] [--limit LINES] [--grep RE] [--max-output N]",
		Short: "Print one block's output",
		Long: "block prints the rendered output of block N (or the last one) of a session.\n" +
			"Long output is cut to a budget (head and tail, with the omitted byte count);\n" +
			"--max-output -1 prints all of it, --offset and --limit page through it by\n" +
			"lines, --grep keeps the lines matching a regular expression (numbered).",
		Example: "  fleetmux block web-1/s3 last\n" +
			"  fleetmux block web-1/s3 12 --grep 'FAIL|panic'\n" +
			"  fleetmux block web-1/s3 12 --offset 200 --limit 100",
		Args: exactArgs("block", 2, "session address NODE/ID and a block number N (or last)"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("block", args)
			if err != nil {
				return err
			}
			n, err := parseBlockNumber(args[1])
			if err != nil {
				return err
			}
			if o.offset < 0 || o.limit < 0 {
				return usageError("block: --offset and --limit count lines: want 0 or more")
			}
			r, raw, err := apiCall(c.Context(), &o.clientOptions, func(ctx context.Context, cl *client.Client) (api.BlockResult, error) {
				if n == 0 { // last: the list's reply is not the one --json prints
					l, err := cl.Blocks(c.Context(), node, id)
					if err != nil {
						return api.BlockResult{}, err
					}
					if len(l.Blocks) == 0 {
						return api.BlockResult{}, &exitError{code: 1, err: fmt.Errorf("%s/%s has no blocks yet", node, id)}
					}
					n = l.Blocks[len(l.Blocks)-1].N
				}
				return cl.Block(ctx, node, id, n, client.BlockQuery{Offset: o.offset, Limit: o.limit, Grep: o.grep, MaxBytes: o.maxBytes})
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				if err := writeText(w, r.Text); err != nil {
					return err
				}
				omittedNote(c.ErrOrStderr(), node+"/"+id, r)
				return nil
			})
		},
	}
	o.register(c, true)
	f := c.Flags()
	f.IntVar(&o.offset, "offset", 0, "skip this many lines (after --grep)")
	f.IntVar(&o.limit, "limit", 0, "print at most this many lines (0: all)")
	f.StringVar(&o.grep, "grep", "", "keep lines matching this regular expression")
	f.IntVar(&o.maxBytes, "max-output", 0, "output budget in bytes (0: the default, -1: unlimited)")
	f.IntVar(&o.maxBytes, "max-bytes", 0, "")
	f.MarkHidden("max-bytes") // its old name, kept for scripts
	return c
}

// parseBlockNumber parses N (≥ 1) or "last" (0).
func parseBlockNumber(s string) (int, error) {
	if s == "last" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, usageError("block: %q: want a block number (1, 2, …) or last", s)
	}
	return n, nil
}

// omittedNote tells on stderr how to read what the budget left out of a block.
func omittedNote(w io.Writer, addr string, r api.BlockResult) {
	if r.OmittedBytes <= 0 {
		return
	}
	// a budget that holds all of it (the text shown, what was left out, the marker)
	all := int64(len(r.Text)) + r.OmittedBytes + 64
	fmt.Fprintf(w, "fleetmux: %d bytes omitted; read all of it with: fleetmux block %s %d --max-output %d (or page with --offset/--limit LINES, filter with --grep RE)\n",
		r.OmittedBytes, addr, r.Block.N, all)
}

type waitOptions struct {
	clientOptions
	until   string
	timeout time.Duration
	after   int64
}

func waitCmd() *cobra.Command {
	var o waitOptions
	c := &cobra.Command{
		Use:   "wait NODE/ID [--until idle|waiting_input|exited|output] [--timeout 60s] [--after OFFSET]",
		Short: "Wait until a session is idle, waits for input, exits or has new output",
		Long: "wait blocks until the session reaches a state and prints its state then:\n" +
			"  idle           at the shell prompt (the default)\n" +
			"  waiting_input  its program reads the terminal (a prompt, a REPL, a password)\n" +
			"  exited         its process has exited\n" +
			"  output         it has output past --after OFFSET\n" +
			"It exits 0 when the state was reached and 124 when --timeout passed first.",
		Example: "  fleetmux wait web-1/s3\n  fleetmux wait web-1/s3 --until waiting_input --timeout 5m",
		Args:    exactArgs("wait", 1, "session address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("wait", args)
			if err != nil {
				return err
			}
			if err := validUntil(o.until); err != nil {
				return err
			}
			ms, err := durationMS("wait", o.timeout)
			if err != nil {
				return err
			}
			if o.after < 0 {
				return usageError("wait: --after %d: offsets are not negative", o.after)
			}
			r, raw, err := apiCall(c.Context(), &o.clientOptions, func(ctx context.Context, cl *client.Client) (api.WaitResult, error) {
				return cl.Wait(ctx, node, id, client.WaitQuery{Until: o.until, TimeoutMS: ms, After: o.after})
			})
			if err != nil {
				return err
			}
			err = o.reply(c.OutOrStdout(), raw, func(w io.Writer) error {
				_, err := fmt.Fprintln(w, r.Session.State)
				return err
			})
			if err != nil {
				return err
			}
			if !r.OK {
				return &exitError{code: 124, err: fmt.Errorf("wait: %s/%s not %s after %v (state %s)", node, id, o.until, o.timeout, r.Session.State)}
			}
			return nil
		},
	}
	o.register(c, true)
	f := c.Flags()
	f.StringVar(&o.until, "until", api.UntilIdle, "idle, waiting_input, exited or output")
	f.DurationVar(&o.timeout, "timeout", 60*time.Second, "how long to wait")
	f.Int64Var(&o.after, "after", 0, "with --until output: the offset to pass")
	return c
}

func validUntil(s string) error {
	switch s {
	case api.UntilIdle, api.UntilWaitingInput, api.UntilExited, api.UntilOutput:
		return nil
	}
	return usageError("wait: --until %q: want idle, waiting_input, exited or output", s)
}

type logsOptions struct {
	clientOptions
	from   int64
	follow bool
}

func logsCmd() *cobra.Command {
	var o logsOptions
	c := &cobra.Command{
		Use:   "logs NODE/ID [--from OFFSET] [-f]",
		Short: "Print a session's raw output (-f: and follow it)",
		Long: "logs prints the session's raw terminal output (escape sequences included) from\n" +
			"byte offset --from to its end. With -f it keeps following new output until the\n" +
			"session exits or you interrupt it, reconnecting (without losing or repeating a\n" +
			"byte) when the controller restarts. --json prints JSON lines instead:\n" +
			"{\"offset\":N,\"data\":BASE64,...}.",
		Example: "  fleetmux logs web-1/s3\n  fleetmux logs -f web-1/s3\n  fleetmux logs web-1/s3 --from 182734",
		Args:    exactArgs("logs", 1, "session address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("logs", args)
			if err != nil {
				return err
			}
			if o.from < 0 {
				return usageError("logs: --from %d: offsets are not negative", o.from)
			}
			cl, err := o.client()
			if err != nil {
				return err
			}
			if o.follow {
				return o.runFollow(c.Context(), cl, node, id, c.OutOrStdout())
			}
			return o.runRead(c.Context(), cl, node, id, c.OutOrStdout())
		},
	}
	o.register(c, true)
	c.Flags().Int64Var(&o.from, "from", 0, "byte offset to start at")
	c.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing new output until the session exits")
	return c
}

// runRead prints the output from --from to its end as it stood when asked, piece
// by piece as it arrives (one request: the controller pages through the node).
func (o *logsOptions) runRead(ctx context.Context, cl *client.Client, node, id string, w io.Writer) error {
	enc := json.NewEncoder(w)
	var werr error // stdout failed: not the controller's fault
	_, err := cl.OutputChunks(ctx, node, id, o.from, 0, func(ch client.Chunk) error {
		if o.json {
			werr = enc.Encode(api.ReadReply{Offset: ch.Offset, Data: ch.Data, End: ch.End, Oldest: ch.Oldest})
		} else {
			_, werr = w.Write(ch.Data)
		}
		return werr
	})
	if werr != nil {
		return werr
	}
	return o.fail(err)
}

// runFollow follows the output with Client.Follow until the session exits.
func (o *logsOptions) runFollow(ctx context.Context, cl *client.Client, node, id string, w io.Writer) error {
	var err error
	if o.json {
		enc := json.NewEncoder(w)
		_, err = cl.FollowChunks(ctx, node, id, o.from, func(off int64, p []byte) error {
			return enc.Encode(struct {
				Offset int64  `json:"offset"`
				Data   []byte `json:"data"`
			}{off, p})
		})
	} else {
		_, err = cl.Follow(ctx, node, id, o.from, w)
	}
	if err != nil && ctx.Err() != nil {
		return &exitError{code: 130} // interrupted: the output so far is printed
	}
	return o.fail(err)
}

func killCmd() *cobra.Command {
	var o clientOptions
	c := &cobra.Command{
		Use:     "kill NODE/ID",
		Short:   "Close a session (its process is ended)",
		Long:    "kill closes the session: its process group gets SIGHUP, then SIGKILL. It prints\nthe session's address (--json: its final state).",
		Example: "  fleetmux kill web-1/s3",
		Args:    exactArgs("kill", 1, "session address NODE/ID"),
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := needAddress("kill", args)
			if err != nil {
				return err
			}
			s, raw, err := apiCall(c.Context(), &o, func(ctx context.Context, cl *client.Client) (api.Session, error) {
				return cl.CloseSession(ctx, node, id)
			})
			if err != nil {
				return err
			}
			return o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printAddress(w, s) })
		},
	}
	o.register(c, true)
	return c
}
