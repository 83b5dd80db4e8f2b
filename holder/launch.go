package holder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/internal/datadir"
)

// LogName is the file in the holder's directory that a launched holder's stderr
// (its log) goes to.
const LogName = "holder.log"

// Ensure returns a client of the holder in dir, launching one when none answers:
// argv (e.g. {"/usr/bin/fleetmux", "holder", "--data", DATA}) runs detached, in a
// session and process group of its own, with its stdin and stdout on /dev/null and
// its stderr appended to dir/holder.log, and is not waited for: it outlives the
// caller. A holder of another protocol is an error (ErrVersion), never replaced.
// Ensure waits for the new holder until ctx ends.
func Ensure(ctx context.Context, dir string, argv []string) (*Client, error) {
	c, err := Dial(ctx, dir)
	if err == nil || errors.Is(err, ErrVersion) || errors.Is(err, ErrPeer) || errors.Is(err, ErrDenied) {
		return c, err
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("holder: none runs in %s: %w", dir, err)
	}
	if err := datadir.Ensure(dir); err != nil {
		return nil, fmt.Errorf("holder: %w", err)
	}
	logf, err := datadir.OpenFile(filepath.Join(dir, LogName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("holder: log: %w", err)
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // not in our process group: a signal to it spares the holder
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("holder: launch %s: %w", argv[0], err)
	}
	// Reap it if it dies early (e.g. another holder won the race); a holder that
	// runs is inherited by init when we exit.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := Dial(ctx, dir)
		if err == nil || errors.Is(err, ErrVersion) || errors.Is(err, ErrPeer) || errors.Is(err, ErrDenied) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("holder: launched %s, but it does not answer: %w (see %s)", argv[0], ctx.Err(), filepath.Join(dir, LogName))
		case werr := <-exited:
			// It ended: maybe another holder took the socket first; one more try.
			if c, err := Dial(ctx, dir); err == nil {
				return c, nil
			}
			return nil, fmt.Errorf("holder: launched %s, it exited (%v): see %s", argv[0], werr, filepath.Join(dir, LogName))
		case <-tick.C:
		}
	}
}
