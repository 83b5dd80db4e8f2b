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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
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

// report prints err once, unless it is a silent exitError: as JSON for a verb run
// with --json (jsonError), else as a line.
func report(w io.Writer, err error) {
	var ee *exitError
	if err == nil || errors.As(err, &ee) && ee.err == nil {
		return
	}
	var je *jsonError
	if errors.As(err, &je) {
		b, _ := json.Marshal(map[string]any{"error": errorJSON(je.err)})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, "fleetmux: %v\n", err)
}

// jsonError is the error of a verb run with --json: report prints it as JSON.
type jsonError struct{ err error }

func (e *jsonError) Error() string { return e.err.Error() }
func (e *jsonError) Unwrap() error { return e.err }

// errorJSON is err as the API's error object: the controller's code, rule and
// approval when it answered one; else a code for the exit status (bad_request for
// a bad command line, unavailable for no answer, timeout for a command still
// running, interrupted, unknown_exit_code, else internal).
func errorJSON(err error) api.Error {
	var ce *client.Error
	if errors.As(err, &ce) {
		return api.Error{Code: ce.Code, Message: ce.Message, Rule: ce.Rule, Approval: ce.Approval}
	}
	code := api.CodeInternal
	switch exitCode(err) {
	case 2:
		code = api.CodeBadRequest
	case exitUnreachable:
		code = api.CodeUnavailable
	case exitStillRunning:
		code = api.CodeTimeout
	case exitCodeUnknown:
		code = "unknown_exit_code"
	case 130:
		code = "interrupted"
	}
	return api.Error{Code: code, Message: err.Error()}
}
