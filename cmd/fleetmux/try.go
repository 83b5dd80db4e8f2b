package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/session"
	"github.com/spf13/cobra"
)

// tryOptions are the flags of `fleetmux try`.
type tryOptions struct {
	shell   string
	json    bool
	timeout time.Duration
	cwd     string
}

func tryCmd() *cobra.Command {
	var o tryOptions
	c := &cobra.Command{
		Use:   "try [--shell bash|zsh] [--json] [--timeout 30s] [--cwd DIR] -- CMD [CMD...]",
		Short: "Run commands one by one in a local session and print each block",
		Long: "try starts a local shell session with shell integration, runs each CMD in turn\n" +
			"as one block, prints the block (a header line, then its rendered output) and\n" +
			"exits with the last command's exit code (1 when it has none).\n\n" +
			"Commands share the session: a cd or an exported variable carries over to the\n" +
			"next one. This is the way to try the session engine until `fleetmux dev` exists.",
		Example: "  fleetmux try -- 'echo hi' 'ls /nonexistent' 'cd /tmp' 'pwd'\n" +
			"  fleetmux try --shell zsh --json -- 'uname -a'",
		RunE: func(c *cobra.Command, args []string) error {
			if err := o.validate(args); err != nil {
				return err
			}
			return o.run(c.Context(), args, c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	f := c.Flags()
	f.StringVar(&o.shell, "shell", "bash", "shell to run the commands in: bash or zsh")
	f.BoolVar(&o.json, "json", false, "print each block as one JSON object (the block, its text and the session)")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long each command may run")
	f.StringVar(&o.cwd, "cwd", "", "working directory of the session (default: the current directory)")
	return c
}

func (o *tryOptions) validate(args []string) error {
	if o.shell != "bash" && o.shell != "zsh" {
		return usageError("try: --shell %q: want bash or zsh", o.shell)
	}
	if o.timeout <= 0 {
		return usageError("try: --timeout %v: want a positive duration, e.g. 30s", o.timeout)
	}
	if len(args) == 0 {
		return usageError("try: no command given: use fleetmux try -- CMD [CMD...]")
	}
	for i, a := range args {
		if strings.TrimSpace(a) == "" {
			return usageError("try: command %d is empty", i+1)
		}
	}
	return nil
}

func (o *tryOptions) run(ctx context.Context, cmds []string, stdout, stderr io.Writer) (err error) {
	dir := o.cwd
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return fmt.Errorf("try: %w", err)
		}
	}
	s, err := session.Start(session.Config{
		ID:     "try",
		Shell:  o.shell,
		Dir:    dir,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return fmt.Errorf("try: %w", err)
	}
	defer func() {
		if cerr := s.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("try: close session: %w", cerr)
		}
	}()
	var last session.Result
	for i, cmd := range cmds {
		res, err := s.Run(ctx, cmd, session.RunOptions{Timeout: o.timeout})
		if err != nil {
			if ctx.Err() != nil {
				return &exitError{code: 130, err: fmt.Errorf("try: interrupted during command %d", i+1)}
			}
			return fmt.Errorf("try: command %d %q: %w", i+1, cmd, err)
		}
		if err := o.print(stdout, res); err != nil {
			return err
		}
		if res.Block.State != session.BlockDone {
			return &exitError{code: 124, err: fmt.Errorf("try: command %d %q still running after %v (session %s); stopped it",
				i+1, cmd, o.timeout, res.Session.State)}
		}
		last = res
	}
	if c := last.Block.ExitCode; c == nil {
		return &exitError{code: 1}
	} else if *c != 0 {
		return &exitError{code: *c}
	}
	return nil
}

// print writes one block: as JSON, or as a header line followed by the block text.
func (o *tryOptions) print(w io.Writer, r session.Result) error {
	if o.json {
		return json.NewEncoder(w).Encode(r)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%d] $ %s  (%s, %s)\n", r.Block.N, strings.ReplaceAll(r.Block.Command, "\n", "\n> "), status(r.Block), r.Block.Cwd)
	if r.Text != "" {
		b.WriteString(r.Text)
		if !strings.HasSuffix(r.Text, "\n") {
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// status is "exit 0, 12ms", "no exit code, 1.2s" or "running after 30s".
func status(b session.Block) string {
	if b.State != session.BlockDone {
		return fmt.Sprintf("running after %v", time.Since(b.StartedAt).Round(time.Millisecond))
	}
	d := b.FinishedAt.Sub(b.StartedAt)
	if d >= time.Millisecond {
		d = d.Round(time.Millisecond)
	} else {
		d = d.Round(time.Microsecond)
	}
	if b.ExitCode == nil {
		return fmt.Sprintf("no exit code, %v", d)
	}
	return fmt.Sprintf("exit %d, %v", *b.ExitCode, d)
}
