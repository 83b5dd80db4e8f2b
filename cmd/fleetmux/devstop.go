package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/holder"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// devStopTimeout bounds how long dev stop waits for the holder to end its sessions
// and exit after SIGTERM.
const devStopTimeout = 15 * time.Second

func devStopCmd() *cobra.Command {
	var data string
	c := &cobra.Command{
		Use:   "stop [--data DIR]",
		Short: "End the holder of fleetmux dev and the sessions it keeps",
		Long: "stop ends the session holder of the fleetmux dev that uses --data, and with it\n" +
			"every session it keeps (their recordings stay under DIR/sessions/). It finds the\n" +
			"holder by its socket, DIR/holder/holder.sock, and touches no other process: the\n" +
			"holders of other data dirs and of other users keep running. With no holder on\n" +
			"that socket it says so and exits 0.\n\n" +
			"Run it after fleetmux dev has stopped: a running dev loses its sessions with the\n" +
			"holder.",
		Example: "  fleetmux dev stop\n  fleetmux dev stop --data /tmp/fm",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return stopDevHolder(c.Context(), data, c.OutOrStdout())
		},
	}
	c.Flags().StringVar(&data, "data", ".fleetmux", "data directory of that fleetmux dev")
	return c
}

// stopDevHolder ends the holder listening in data's holder directory: SIGTERM,
// which ends every session it holds, then waits until the process is gone.
func stopDevHolder(ctx context.Context, data string, stdout io.Writer) error {
	abs, err := filepath.Abs(data)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hc, err := holder.Dial(dctx, holderDir(abs))
	switch {
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
		_, err = fmt.Fprintf(stdout, "no holder runs for %s: nothing to stop\n", data)
		return err
	case err != nil:
		return fmt.Errorf("dev stop: %w", err)
	}
	defer hc.Close()
	_, pid := hc.HolderVersion()
	if pid <= 0 {
		return fmt.Errorf("dev stop: the holder on %s told no pid", filepath.Join(holderDir(data), holder.SocketName))
	}
	// The pid comes from the holder's hello. A pidfd taken while the connection
	// still answers names that very process, never one that got its pid later.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("dev stop: holder pid %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	list, err := hc.List(dctx)
	if err != nil {
		return fmt.Errorf("dev stop: the holder (pid %d): %w", pid, err)
	}
	hc.Close()
	if err := unix.PidfdSendSignal(pidfd, unix.SIGTERM, nil, 0); err != nil {
		return fmt.Errorf("dev stop: SIGTERM to the holder (pid %d): %w", pid, err)
	}
	if err := waitPidfd(ctx, pidfd, devStopTimeout); err != nil {
		return fmt.Errorf("dev stop: the holder (pid %d) %w", pid, err)
	}
	running := runningHeld(list)
	if len(running) == 0 {
		_, err = fmt.Fprintf(stdout, "stopped the holder of %s (pid %d); it held no running session\n", data, pid)
		return err
	}
	_, err = fmt.Fprintf(stdout, "stopped the holder of %s (pid %d) and %d session(s): %s\n", data, pid, len(running), strings.Join(running, ", "))
	return err
}

// waitPidfd waits until the process of pidfd has exited (the pidfd turns
// readable), for at most d.
func waitPidfd(ctx context.Context, pidfd int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("did not exit within %v", d)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// Short polls, so a cancelled ctx is seen soon.
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(min(left, 200*time.Millisecond)/time.Millisecond)+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
}

// runningHeld names the sessions of a holder's list whose program still runs:
// "s1" or `s1 "title"`, printable.
func runningHeld(list []holder.Info) []string {
	var out []string
	for _, in := range list {
		if in.Exited {
			continue
		}
		var meta struct {
			Title string `json:"title"`
		}
		_ = json.Unmarshal(in.Meta, &meta) // metadata is optional: the id alone then
		name := cell(in.ID, 63)
		if meta.Title != "" {
			name += " \"" + cell(meta.Title, 40) + "\""
		}
		out = append(out, name)
	}
	return out
}

// devExitNote is what dev prints on its way out about the sessions its holder
// keeps running (nothing when it has no holder).
func devExitNote(w io.Writer, hc *holder.Client, data string) {
	if hc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	list, err := hc.List(ctx)
	if err != nil {
		fmt.Fprintf(w, "fleetmux dev: the holder did not answer (%v); fleetmux dev stop%s ends it and its sessions\n", err, dataFlag(data))
		return
	}
	running := runningHeld(list)
	if len(running) == 0 {
		fmt.Fprintln(w, "fleetmux dev: stopped; no session keeps running")
		return
	}
	_, pid := hc.HolderVersion()
	fmt.Fprintf(w, "fleetmux dev: stopped; %d session(s) keep running in the holder (pid %d): %s\n"+
		"  fleetmux dev%s        starts again and reattaches them\n"+
		"  fleetmux dev stop%s   ends them and the holder\n",
		len(running), pid, strings.Join(running, ", "), dataFlag(data), dataFlag(data))
}

// dataFlag is " --data DIR" for a data dir other than the default, "" otherwise.
func dataFlag(data string) string {
	data = api.Printable(data)
	if data == ".fleetmux" {
		return ""
	}
	if strings.ContainsAny(data, " \t\n'\"\\$`") {
		return " --data '" + strings.ReplaceAll(data, "'", `'\''`) + "'"
	}
	return " --data " + data
}
