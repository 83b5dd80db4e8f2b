package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
)

// Error is an error reply of the API (or a check the client made before sending):
// Status is the HTTP status (0 for local checks), Code one of the api.Code* values.
type Error struct {
	Status  int
	Code    string
	Message string
	// Rule names the guardrail rule of a denied or held reply; Approval is the
	// approval (NODE/ID) a held request waits for.
	Rule, Approval string

	health *api.Health // a 503 reply of /healthz that carried a health body
}

// Error is "CODE: message", the form the CLI prints after "fleetmux: ".
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is makes errors.Is(err, ErrNotFound) (and the other sentinels) match on the code:
// it matches any *Error target whose Message is empty and whose Code is e's.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// Unwrap gives the same error as an *api.Error, so errors.As(err, &apiErr) and
// errors.Is(err, &api.Error{Code: ...}) work too.
func (e *Error) Unwrap() error {
	return &api.Error{Code: e.Code, Message: e.Message, Rule: e.Rule, Approval: e.Approval}
}

// Sentinels for errors.Is; they match by code.
var (
	ErrBadRequest   = &Error{Code: api.CodeBadRequest}
	ErrUnauthorized = &Error{Code: api.CodeUnauthorized}
	ErrForbidden    = &Error{Code: api.CodeForbidden}
	ErrNotFound     = &Error{Code: api.CodeNotFound}
	ErrBusy         = &Error{Code: api.CodeBusy}
	ErrExited       = &Error{Code: api.CodeExited}
	ErrGone         = &Error{Code: api.CodeGone}
	ErrTooLarge     = &Error{Code: api.CodeTooLarge}
	ErrLimit        = &Error{Code: api.CodeLimit}
	ErrInternal     = &Error{Code: api.CodeInternal}
	ErrUnavailable  = &Error{Code: api.CodeUnavailable}
	ErrTimeout      = &Error{Code: api.CodeTimeout}
	ErrDenied       = &Error{Code: api.CodeDenied}
	ErrHeld         = &Error{Code: api.CodeHeld}
)

// readError turns an error response into an *Error.
func readError(resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes)) // what arrived before an error is enough
	return parseError(resp.StatusCode, body)
}

// parseError decodes an error reply: the API's {"error": {...}} envelope, or, for
// anything else (a proxy's HTML page, plain text), a code that fits the status and
// the start of the body as the message.
func parseError(status int, body []byte) *Error {
	var env struct {
		Error  *api.Error `json:"error"`
		Status string     `json:"status"` // a health reply
	}
	if err := json.Unmarshal(body, &env); err == nil {
		if env.Error != nil && env.Error.Code != "" {
			return &Error{Status: status, Code: env.Error.Code, Message: env.Error.Message, Rule: env.Error.Rule, Approval: env.Error.Approval}
		}
		if status == http.StatusServiceUnavailable && env.Status != "" {
			var h api.Health
			if json.Unmarshal(body, &h) == nil {
				return &Error{Status: status, Code: api.CodeUnavailable, Message: "controller health: " + h.Status, health: &h}
			}
		}
	}
	msg := snippet(body)
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
	} else {
		msg = fmt.Sprintf("HTTP %d: %s", status, msg)
	}
	return &Error{Status: status, Code: api.CodeForStatus(status), Message: msg}
}

// snippet is the first 200 bytes of body as one trimmed line of valid UTF-8.
func snippet(body []byte) string {
	const max = 200
	cut := false
	if len(body) > max {
		body, cut = body[:max], true
		for len(body) > 0 && !utf8.Valid(body) && len(body) > max-4 {
			body = body[:len(body)-1]
		}
	}
	s := strings.ToValidUTF8(string(bytes.TrimSpace(body)), "?")
	s = strings.Join(strings.Fields(s), " ")
	if cut {
		s += "..."
	}
	return s
}
