package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fleetmux/fleetmux/api"
)

// Tool errors: a Fleet error or a bad argument, worded for a model: what was
// wrong, then what to call instead.

// toolError is a tool error: msg is what the model reads, code the api error code
// it stands for (the audit record's result).
type toolError struct{ msg, code string }

func (e *toolError) Error() string { return e.msg }

// toolErrf is a tool error about the call's arguments.
func toolErrf(format string, args ...any) error {
	return &toolError{msg: fmt.Sprintf(format, args...), code: api.CodeBadRequest}
}

// errCode is the api error code err stands for.
func errCode(err error) string {
	var te *toolError
	var ae *api.Error
	switch {
	case errors.As(err, &te):
		return te.code
	case errors.As(err, &ae):
		return ae.Code
	}
	return api.CodeInternal
}

// explain rewrites err (an *api.Error from the Fleet, usually) for a model, about
// the session node/id (either may be empty). Other errors are words of
// Options.Unreachable, or internal errors.
func (m *Server) explain(err error, node, id string) error {
	var te *toolError
	if errors.As(err, &te) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &toolError{msg: "cancelled: the call was cancelled or the server is shutting down", code: api.CodeTimeout}
	}
	var ae *api.Error
	if !errors.As(err, &ae) && m.opts.Unreachable != nil {
		return &toolError{msg: "unavailable: " + m.opts.Unreachable(err), code: api.CodeUnavailable}
	}
	if ae == nil {
		return &toolError{msg: fmt.Sprintf("internal error: %v", err), code: api.CodeInternal}
	}
	e := explainAPI(ae, node, id).(*toolError)
	e.code = ae.Code
	return e
}

// explainAPI words an api error for a model.
func explainAPI(ae *api.Error, node, id string) error {
	where := addr(node, id)
	msg := ae.Message
	switch ae.Code {
	case api.CodeNotFound:
		switch {
		case strings.HasPrefix(msg, "unknown node"):
			return toolErrf("unknown node %q: call list_nodes to see the nodes", node)
		case strings.HasPrefix(msg, "no session") && id != "":
			return toolErrf("no session %s: call list_sessions to see the sessions, or create_session", where)
		case strings.Contains(msg, "block"):
			return toolErrf("%s: call read_block without n for the last block, or list_sessions to see how many blocks %s has", msg, where)
		}
		return toolErrf("not found: %s (call list_nodes or list_sessions)", msg)
	case api.CodeBusy:
		if strings.Contains(msg, " is held by ") { // the writer lease: someone else writes into it
			return toolErrf("another writer has %s (%s): wait and try again (wait_for until idle, then retry), or use another session (create_session); do not interrupt a person's work", where, msg)
		}
		what := ""
		if i := strings.Index(msg, "(block "); i >= 0 {
			what = " " + msg[i:]
		}
		return toolErrf("a command is running in %s and is not waiting for input%s: call wait_for to wait for it, send_keys with [\"C-c\"] to interrupt it, or use another session (create_session)", where, what)
	case api.CodeExited:
		return toolErrf("the session %s has exited (%s): call create_session for a new one", where, msg)
	case api.CodeUnavailable:
		return toolErrf("unavailable: %s: call list_nodes to see which nodes are alive, and use another one", msg)
	case api.CodeTimeout:
		return toolErrf("timeout: %s: try again, or call list_nodes to check the node", msg)
	case api.CodeLimit:
		return toolErrf("limit reached: %s: close sessions you no longer need (close_session)", msg)
	case api.CodeTooLarge:
		return toolErrf("too large: %s", msg)
	case api.CodeGone:
		return toolErrf("gone: %s", msg)
	case api.CodeBadRequest:
		return toolErrf("bad arguments: %s", msg)
	case api.CodeUnauthorized, api.CodeForbidden:
		return toolErrf("refused by the controller: %s", msg)
	}
	return toolErrf("%s: %s", ae.Code, msg)
}
