package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/spf13/cobra"
)

// runOptions are the flags of `fleetmux run`: one session, or a fan-out when a
// selector is given.
type runOptions struct {
	clientOptions
	timeout        time.Duration
	maxOutput      int
	idempotencyKey string

	// fan-out
	all           bool
	labels        []string
	nodes         []string
	sessions      []string
	session       string
	shell         string
	batch         int
	stopOnFailure bool
	verbose       bool

	// one session
	raw    bool // print the raw bytes as they arrive
	follow bool // keep following after --timeout
	noWait bool // a held command fails (255) instead of waiting for the decision
}

func runVerbCmd() *cobra.Command { return runVerbCmdWith(&runOptions{}) }

// runVerbCmdWith is `fleetmux run` with its flags in o.
func runVerbCmdWith(o *runOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "run (NODE/ID | --all | --label k=v | --nodes a,b | --sessions n/s,...) [flags] -- CMD...",
		Short: "Run a command in a session (or on many) and print its output",
		Long: "run NODE/ID -- CMD runs CMD (its words joined with spaces) in the session, prints\n" +
			"its output as it arrives (the rendered text; --raw: the raw bytes) and exits the\n" +
			"way ssh does: with the command's exit code; 124 when --timeout passes first (the\n" +
			"command keeps running: --follow keeps printing until it ends and exits like it);\n" +
			"254 when the command finished but its exit code is unknown (typed into a program\n" +
			"without shell integration: stderr says why); 255 when fleetmux itself failed\n" +
			"(unreachable, refused, denied, a bad command line). It never exits 0 unless the\n" +
			"command exited 0. A command a guardrail holds for approval waits for the decision\n" +
			"(stderr names the approval: fleetmux approve NODE/aN decides it), then runs and\n" +
			"exits like the command; --no-wait fails it at once (255). With --json the reply\n" +
			"comes at the end, its output cut to a budget (head and tail). Put CMD after --\n" +
			"when it has flags of its own.\n\n" +
			"With a selector the command fans out, one run per target:\n" +
			"  --all               every alive node\n" +
			"  --label k=v         nodes with these labels (repeatable: all must match)\n" +
			"  --nodes a,b         these nodes (with --label: those that also match)\n" +
			"  --sessions n/s,...  these sessions\n" +
			"On a node, the command runs in the session titled --session (created when\n" +
			"missing), or in a fresh session. It prints one line per target and a total:\n" +
			"  web-1/s3  exit=0  12ms  first line of output\n" +
			"  web-2     FAILED  unavailable: node web-2 is dead\n" +
			"  ok=1 failed=1\n" +
			"-v prints each target's whole output too. A target succeeded when its command\n" +
			"exited 0 (an unknown exit code is a failure). It exits 0 when every target\n" +
			"succeeded, else 1; with one target, as run NODE/ID does (124, 254, 255).",
		Example: "  fleetmux run web-1/s3 -- make test\n" +
			"  fleetmux run web-1/s3 --timeout 10m -- ./deploy.sh --dry-run\n" +
			"  fleetmux run --all -- uptime\n" +
			"  fleetmux run --label role=web --session deploy --batch 5 --stop-on-failure -- ./deploy.sh\n" +
			"  fleetmux run --sessions web-1/s3,web-2/s1 -v -- git pull",
		RunE: func(c *cobra.Command, args []string) error {
			if o.fanout() {
				req, err := o.fanoutRequest(c, args)
				if err != nil {
					return ownFailure(err)
				}
				return o.runFanout(c, req)
			}
			node, id, body, err := o.single(c, args)
			if err != nil {
				return ownFailure(err)
			}
			return o.runOne(c, node, id, body)
		},
	}
	// A bad flag is fleetmux's own failure too: 255, like ssh.
	c.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return ownFailure(c.Root().FlagErrorFunc()(c, err))
	})
	o.register(c, true)
	f := c.Flags()
	f.DurationVar(&o.timeout, "timeout", 60*time.Second, "how long the command may run before run returns (per target)")
	f.IntVar(&o.maxOutput, "max-output", 0, "output budget in bytes (0: the default, -1: unlimited)")
	f.StringVar(&o.idempotencyKey, "idempotency-key", "", "a retry with the same key returns the first run's block instead of running again")
	f.BoolVar(&o.raw, "raw", false, "print the output's raw bytes (escape sequences included) as they arrive, not the rendered text")
	f.BoolVar(&o.follow, "follow", false, "when --timeout passes, keep printing the output until the command ends, and exit like it")
	f.BoolVar(&o.noWait, "no-wait", false, "a command held for approval fails (exit 255) instead of waiting for the decision")
	f.BoolVar(&o.all, "all", false, "fan out to every alive node")
	f.StringArrayVar(&o.labels, "label", nil, "fan out to nodes with this label k=v (repeatable)")
	f.StringSliceVar(&o.nodes, "nodes", nil, "fan out to these nodes (comma-separated)")
	f.StringSliceVar(&o.sessions, "sessions", nil, "fan out to these sessions NODE/ID (comma-separated)")
	f.StringVar(&o.session, "session", "", "fan-out: run in the session with this title on each node (created when missing)")
	f.StringVar(&o.shell, "shell", "", "fan-out: shell of created sessions (bash or zsh)")
	f.IntVar(&o.batch, "batch", 0, "fan-out: targets running at once (default and cap: 256)")
	f.BoolVar(&o.stopOnFailure, "stop-on-failure", false, "fan-out: start no more targets once one failed")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "fan-out: print each target's whole output")
	f.BoolVar(&o.verbose, "output", false, "")
	f.MarkHidden("output") // its old name, kept for scripts (MarkDeprecated would print to stdout)
	return c
}

// fanout reports whether a selector was given.
func (o *runOptions) fanout() bool {
	return o.all || len(o.labels) > 0 || len(o.nodes) > 0 || len(o.sessions) > 0
}

// command joins CMD words, checking there is one.
func (o *runOptions) command(words []string) (string, error) {
	cmd := strings.Join(words, " ")
	if strings.TrimSpace(cmd) == "" {
		return "", usageError("run: no command given: use fleetmux run NODE/ID -- CMD")
	}
	if len(cmd) > api.MaxCommandBytes {
		return "", usageError("run: the command is %d bytes long, the limit is %d", len(cmd), api.MaxCommandBytes)
	}
	if o.maxOutput < -1 {
		return "", usageError("run: --max-output %d: want a byte count, 0 (the default) or -1 (unlimited)", o.maxOutput)
	}
	return cmd, nil
}

// single parses `run NODE/ID [--] CMD...`.
func (o *runOptions) single(c *cobra.Command, args []string) (node, id string, body api.RunBody, err error) {
	for _, name := range []string{"session", "shell", "batch", "stop-on-failure", "verbose", "output"} {
		if c.Flags().Changed(name) {
			return "", "", body, usageError("run: --%s applies to a fan-out only (--all, --label, --nodes or --sessions)", name)
		}
	}
	if len(args) == 0 || c.ArgsLenAtDash() == 0 {
		return "", "", body, usageError("run: no session address: use fleetmux run NODE/ID -- CMD, or fan out with --all, --label, --nodes or --sessions")
	}
	if node, id, err = parseAddress("run", args[0]); err != nil {
		return "", "", body, err
	}
	cmd, err := o.command(args[1:])
	if err != nil {
		return "", "", body, err
	}
	ms, err := durationMS("run", o.timeout)
	if err != nil {
		return "", "", body, err
	}
	return node, id, api.RunBody{Command: cmd, TimeoutMS: ms, MaxOutputBytes: o.maxOutput, IdempotencyKey: o.idempotencyKey}, nil
}

func (o *runOptions) runOne(c *cobra.Command, node, id string, body api.RunBody) error {
	cl, err := o.client()
	if err != nil {
		return ownFailure(err)
	}
	ctx, stdout, stderr := c.Context(), c.OutOrStdout(), c.ErrOrStderr()
	var raw []byte
	var r api.BlockResult
	printed := false
	if o.json {
		r, err = cl.Run(client.CaptureReply(ctx, &raw), node, id, body)
	} else {
		r, printed, err = o.streamRun(ctx, cl, node, id, body, stdout)
	}
	var ce *client.Error
	if errors.As(err, &ce) && ce.Code == api.CodeHeld && !o.noWait {
		if o.json {
			ctx = client.CaptureReply(ctx, &raw)
		}
		r, err = o.waitApproval(ctx, cl, node, id, ce, stderr)
		printed = false
	}
	if err != nil {
		return ownFailure(o.fail(err))
	}
	if o.json {
		if err := printJSON(stdout, raw); err != nil {
			return err
		}
	} else if !printed {
		if err := writeText(stdout, r.Text); err != nil {
			return err
		}
		omittedNote(stderr, node+"/"+id, r)
	}
	return runExit(node+"/"+id, o.timeout, r)
}

// waitApproval waits for the decision on a held run (saying so on stderr) and
// returns its block once it ran; denied, expired or not run is fleetmux's failure.
func (o *runOptions) waitApproval(ctx context.Context, cl *client.Client, node, id string, held *client.Error, stderr io.Writer) (api.BlockResult, error) {
	anode, aid, err := api.ParseAddress(held.Approval)
	if err != nil {
		return api.BlockResult{}, held
	}
	rule := ""
	if held.Rule != "" {
		rule = fmt.Sprintf(" (rule %q)", api.Printable(held.Rule))
	}
	fmt.Fprintf(stderr, "fleetmux: held for approval%s: %s. Waiting for the decision: fleetmux approve %s (or fleetmux deny %s); Ctrl-C stops waiting, the approval stays.\n",
		rule, held.Approval, held.Approval, held.Approval)
	for {
		a, err := cl.Approval(ctx, anode, aid, int(api.MaxWait/time.Millisecond))
		if err != nil {
			return api.BlockResult{}, err
		}
		if !a.Done {
			continue
		}
		switch {
		case a.State == api.ApprovalDenied:
			return api.BlockResult{}, fmt.Errorf("%s denied by %s: %s", a.Addr(), orDash(api.Printable(a.DecidedBy)), orDash(api.Printable(a.Reason)))
		case a.State == api.ApprovalExpired:
			return api.BlockResult{}, fmt.Errorf("%s expired: nobody decided in time", a.Addr())
		case a.Error != "":
			return api.BlockResult{}, fmt.Errorf("%s was approved but did not run: %s", a.Addr(), api.Printable(a.Error))
		case a.Block == 0:
			return api.BlockResult{}, fmt.Errorf("%s was approved but no block ran", a.Addr())
		}
		fmt.Fprintf(stderr, "fleetmux: %s approved by %s: block %d\n", a.Addr(), orDash(api.Printable(a.DecidedBy)), a.Block)
		return cl.Block(ctx, node, id, a.Block, client.BlockQuery{MaxBytes: o.maxOutput})
	}
}

// Exit statuses of `fleetmux run` besides the command's own (DESIGN's CLI section).
const (
	exitStillRunning = 124 // the timeout passed while the command runs
	exitCodeUnknown  = 254 // finished, exit code unknown
	exitOwnFailure   = 255 // fleetmux itself failed: unreachable, refused, denied, bad usage
)

// runExit is the exit of `fleetmux run` for a block: its exit code; 124 with a note
// while it still runs; 254 with the reason when it finished without one.
func runExit(addr string, timeout time.Duration, r api.BlockResult) error {
	switch {
	case r.Block.State == api.BlockRunning:
		return &exitError{code: exitStillRunning, err: fmt.Errorf("still running after %v: fleetmux wait %s (then fleetmux block %s %d)", timeout, addr, addr, r.Block.N)}
	case r.Block.ExitCode == nil:
		return &exitError{code: exitCodeUnknown, err: fmt.Errorf("%s: block %d finished, exit code unknown: %s", addr, r.Block.N, noteOr(r.Block.ExitCodeNote))}
	case *r.Block.ExitCode == 0:
		return nil
	}
	return &exitError{code: *r.Block.ExitCode}
}

func noteOr(note string) string {
	if note == "" {
		return "no reason given"
	}
	return note
}

// ownFailure makes err, an error of fleetmux itself rather than of the command,
// exit 255 (an interrupt keeps its 130).
func ownFailure(err error) error {
	var ee *exitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.code == 130:
		return err
	case errors.As(err, &ee) && ee.err != nil:
		return &exitError{code: exitOwnFailure, err: ee.err}
	}
	return &exitError{code: exitOwnFailure, err: err}
}

// fanoutRequest parses `run SELECTOR [--] CMD...`.
func (o *runOptions) fanoutRequest(c *cobra.Command, args []string) (api.FanoutRequest, error) {
	var req api.FanoutRequest
	if c.Flags().Changed("idempotency-key") && o.idempotencyKey == "" {
		return req, usageError("run: --idempotency-key is empty")
	}
	for _, name := range []string{"raw", "follow", "no-wait"} {
		if c.Flags().Changed(name) {
			return req, usageError("run: --%s applies to one session (run NODE/ID), not to a fan-out", name)
		}
	}
	if n := c.ArgsLenAtDash(); n > 0 {
		return req, usageError("run: %q before --: a fan-out takes its targets from --all, --label, --nodes or --sessions, not an address", args[0])
	}
	sel := api.Selector{All: o.all}
	var err error
	if sel.Labels, err = parseLabels(o.labels); err != nil {
		return req, err
	}
	for _, n := range o.nodes {
		if err := api.ValidName(n); err != nil {
			return req, usageError("run: --nodes: %s", nameErr(err))
		}
		sel.Nodes = append(sel.Nodes, n)
	}
	for _, s := range o.sessions {
		if _, _, err := parseAddress("run: --sessions", s); err != nil {
			return req, err
		}
		sel.Sessions = append(sel.Sessions, s)
	}
	switch {
	case len(sel.Sessions) > 0 && (sel.All || len(sel.Nodes) > 0 || len(sel.Labels) > 0):
		return req, usageError("run: --sessions names the targets itself: drop --all, --label and --nodes")
	case len(sel.Sessions) > 0 && (o.session != "" || o.shell != ""):
		return req, usageError("run: --session and --shell pick sessions on nodes: they do not go with --sessions")
	case sel.All && (len(sel.Nodes) > 0 || len(sel.Labels) > 0):
		return req, usageError("run: --all selects every node: drop --label and --nodes (or --all)")
	case o.batch < 0:
		return req, usageError("run: --batch %d: want 1 or more", o.batch)
	}
	cmd, err := o.command(args)
	if err != nil {
		return req, err
	}
	ms, err := durationMS("run", o.timeout)
	if err != nil {
		return req, err
	}
	return api.FanoutRequest{
		Selector: sel, Command: cmd, Session: o.session, Shell: o.shell, TimeoutMS: ms,
		MaxOutputBytes: o.maxOutput, Batch: o.batch, StopOnFailure: o.stopOnFailure, IdempotencyKey: o.idempotencyKey,
	}, nil
}

func (o *runOptions) runFanout(c *cobra.Command, req api.FanoutRequest) error {
	fo, raw, err := apiCall(c.Context(), &o.clientOptions, func(ctx context.Context, cl *client.Client) (api.Fanout, error) {
		return cl.Fanout(ctx, req)
	})
	if err != nil {
		return ownFailure(err)
	}
	err = o.reply(c.OutOrStdout(), raw, func(w io.Writer) error { return printFanout(w, fo, o.verbose) })
	if err != nil {
		return err
	}
	return fanoutExit(fo)
}

// target is a fan-out result's name: NODE/SESSION, or NODE without a session.
func target(r api.FanoutResult) string {
	if r.Session == "" {
		return r.Node
	}
	return r.Node + "/" + r.Session
}

// exitCode of a fan-out result: its own, else its block's.
func resultExit(r api.FanoutResult) *int {
	if r.ExitCode != nil {
		return r.ExitCode
	}
	if r.Block != nil {
		return r.Block.ExitCode
	}
	return nil
}

// summary is one target's line: "NODE/S\texit=N\t12ms\tfirst line" or
// "NODE\tFAILED\tcode: message".
func summary(r api.FanoutResult) string {
	if r.Error != nil {
		word := "FAILED"
		if r.Error.Code == api.CodeSkipped {
			word = "SKIPPED"
		}
		return fmt.Sprintf("%s\t%s\t%s", target(r), word, cell(r.Error.Error(), 100))
	}
	status := api.BlockDone
	switch c := resultExit(r); {
	case r.Block != nil && r.Block.State == api.BlockRunning:
		status = api.BlockRunning
	case c != nil:
		status = fmt.Sprintf("exit=%d", *c)
	}
	d := (time.Duration(r.DurationMS) * time.Millisecond).String()
	return strings.TrimRight(fmt.Sprintf("%s\t%s\t%s\t%s", target(r), status, d, outputLine(r.Text, 60)), "\t")
}

// outputLine is the first line of a command's output that is not blank, marked " …"
// when more lines follow, cut to n runes.
func outputLine(text string, n int) string {
	l, more := api.FirstLine(text)
	if more {
		l += " …"
	}
	return api.Clip(l, n)
}

// printFanout prints a fan-out's results: with verbose each target's output under a
// header first; then one summary line per target and the totals.
func printFanout(w io.Writer, fo api.Fanout, verbose bool) error {
	if verbose {
		for _, r := range fo.Results {
			head := strings.ReplaceAll(summary(r), "\t", "  ")
			if r.OmittedBytes > 0 {
				head += fmt.Sprintf("  (%d bytes omitted)", r.OmittedBytes)
			}
			if _, err := fmt.Fprintf(w, "=== %s\n", head); err != nil {
				return err
			}
			if err := writeText(w, r.Text); err != nil {
				return err
			}
		}
		if len(fo.Results) > 0 {
			fmt.Fprintln(w)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range fo.Results {
		fmt.Fprintln(tw, summary(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "ok=%d failed=%d\n", fo.OK, fo.Failed)
	return err
}

// fanoutExit is 0 when every target succeeded, else 1; with exactly one target,
// what run NODE/ID would exit (see targetExit).
func fanoutExit(fo api.Fanout) error {
	if len(fo.Results) == 1 {
		return targetExit(fo.Results[0])
	}
	if len(fo.Results) == 0 {
		return &exitError{code: exitOwnFailure, err: fmt.Errorf("run: no target matched the selector (see fleetmux nodes, fleetmux ls)")}
	}
	if fo.Failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// targetExit is one target's exit: its command's code; 124 still running; 254
// finished with the code unknown; 255 not run (an error, or skipped).
func targetExit(r api.FanoutResult) error {
	c := resultExit(r)
	switch {
	case r.Block != nil && r.Block.State == api.BlockRunning:
		return &exitError{code: exitStillRunning}
	case c != nil && *c == 0:
		return nil
	case c != nil:
		return &exitError{code: *c}
	case r.Block != nil && r.Block.State == api.BlockDone:
		return &exitError{code: exitCodeUnknown}
	}
	return &exitError{code: exitOwnFailure}
}
