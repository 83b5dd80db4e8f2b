// Command fleetmux is the one fleetmux binary: the servers (dev, node, controller,
// controller init, enroll), the client verbs of the HTTP API (nodes, ls, new, run,
// send, keys, screen, blocks, block, wait, attach, logs, kill), mcp (the MCP server
// over stdio), replay, try (commands in a local session) and version. It holds flags,
// config, logging, signals and wiring only; the logic lives in the packages. Its
// version is set at build time (-ldflags "-X main.version=v0.2.0") and passed to the
// node and the controller.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	report(os.Stderr, err)
	os.Exit(exitCode(err))
}

// exitError carries the process exit code. With a nil err it is silent: the command
// has already shown what happened (e.g. the exit code of the last command of `try`).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError is an error in the command line (exit code 2).
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// exitCode is 0 for nil, the code of an exitError, and 1 for any other error.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	return 1
}

// report prints err once, unless it is a silent exitError.
func report(w io.Writer, err error) {
	var ee *exitError
	if err == nil || errors.As(err, &ee) && ee.err == nil {
		return
	}
	fmt.Fprintf(w, "fleetmux: %v\n", err)
}
