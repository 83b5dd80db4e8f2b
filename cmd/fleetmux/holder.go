package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/holder"
	"github.com/spf13/cobra"
)

// holderDir is where a node's holder listens, under its data dir.
func holderDir(data string) string { return filepath.Join(data, "holder") }

func holderCmd() *cobra.Command {
	var data string
	var verbose bool
	var idle time.Duration
	c := &cobra.Command{
		Use:   "holder [--data DIR]",
		Short: "Keep this host's session PTYs so they outlive the node agent",
		Long: "holder keeps the PTYs, programs and recent raw output of the node agent's\n" +
			"sessions, so a crash, restart or upgrade of the agent leaves them running; the\n" +
			"agent reattaches when it starts. It listens on DIR/holder/holder.sock (0600, its\n" +
			"directory 0700; only its own user may connect). The node agent starts one itself\n" +
			"when none runs (detached: its own session and process group); under systemd run\n" +
			"it as a service of its own (or give the agent's unit KillMode=process) so stopping\n" +
			"the agent does not stop it (and pass --idle-exit=0). SIGTERM or SIGINT ends it and\n" +
			"every session it holds. A holder that holds no session and has no agent connected\n" +
			"exits after --idle-exit.",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if idle < 0 {
				return usageError("holder: --idle-exit %v: want 0 (never) or a positive duration", idle)
			}
			if idle == 0 {
				idle = -1 // holder.Config: negative is never
			}
			return runHolder(c.Context(), data, idle, verbose, c.ErrOrStderr())
		},
	}
	c.Flags().StringVar(&data, "data", ".fleetmux", "data directory (the holder uses DIR/holder/)")
	c.Flags().DurationVar(&idle, "idle-exit", holder.DefaultIdleExit, "exit after this long with no session and no agent connected (0: never, e.g. as a service)")
	c.Flags().BoolVar(&verbose, "verbose", false, "debug logs")
	return c
}

// ensureHolder connects to the node's holder when on, starting one (this binary,
// detached) when none runs; nil when off.
func ensureHolder(ctx context.Context, st *stack, on bool, data string) (*holder.Client, error) {
	if !on {
		return nil, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	data, err = filepath.Abs(data)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hc, err := holder.Ensure(ctx, holderDir(data), []string{exe, "holder", "--data", data})
	if err != nil {
		return nil, err
	}
	st.defer_(func() { hc.Close() })
	return hc, nil
}

func runHolder(ctx context.Context, data string, idle time.Duration, verbose bool, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// SIGHUP is caught and dropped, so a holder launched from a terminal outlives
	// it. Not signal.Ignore: an ignored signal stays ignored across exec, and every
	// session's program would start deaf to SIGHUP (a closed session's jobs too).
	hup := make(chan os.Signal, 1) // never read: a SIGHUP finds it full or fills it
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := newLogger(&lockedWriter{w: stderr}, verbose)
	srv, err := holder.Listen(holder.Config{Dir: holderDir(data), Version: buildVersion(), Logger: log, IdleExit: idle})
	if err != nil {
		return err
	}
	log.Info("holder listening", "socket", srv.Path())
	err = srv.Serve(ctx)
	srv.Close()
	return err
}
