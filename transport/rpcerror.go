package transport

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/fleetmux/fleetmux/api"
)

// Node API errors travel as NATS micro service errors, never as bodies told apart
// by their first bytes. An error reply carries the headers Nats-Service-Error (the
// message, on one line, at most maxErrorHeader bytes) and Nats-Service-Error-Code
// (the HTTP status of the api error code, as micro clients expect a number), and
// its body is the *api.Error as JSON: code, message, and the rule and approval of
// a denied or held request. A reply without Nats-Service-Error-Code is a value,
// whatever its body holds.

// maxErrorHeader bounds the message in Nats-Service-Error (the body has all of it).
const maxErrorHeader = 512

// respondError answers req with e as a service error. It sets micro's error
// headers itself rather than through req.Error: that records the error in the
// request for micro's statistics, which micro reads on the subscription's
// goroutine when the handler returns, while the reply is sent later, by a worker.
func respondError(req micro.Request, e *api.Error) error {
	return req.Respond(errorBody(e), micro.WithHeaders(errorHeaders(e)))
}

// errorHeaders are the service error headers of e.
func errorHeaders(e *api.Error) micro.Headers {
	return micro.Headers{
		micro.ErrorCodeHeader: {strconv.Itoa(api.HTTPStatus(e.Code))},
		micro.ErrorHeader:     {headerText(e.Message, e.Code)},
	}
}

// errorBody is e as JSON.
func errorBody(e *api.Error) []byte {
	body, err := json.Marshal(e)
	if err != nil { // cannot happen: strings only
		return nil
	}
	return body
}

// headerText is s as a header value: control characters become spaces, it is cut
// to maxErrorHeader bytes (at a character's start), and an empty one is fallback
// (micro requires a description).
func headerText(s, fallback string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxErrorHeader {
		cut := maxErrorHeader
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	if s = strings.TrimSpace(s); s == "" {
		return fallback
	}
	return s
}

// replyError is the *api.Error a reply carries, or nil when the reply is a value
// (no Nats-Service-Error-Code). A service error whose body is no api error (a micro
// service of someone else's, a body cut short) takes its code from the status and
// its message from Nats-Service-Error.
func replyError(m *nats.Msg) *api.Error {
	status := m.Header.Get(micro.ErrorCodeHeader)
	if status == "" {
		return nil
	}
	var e api.Error
	if err := json.Unmarshal(m.Data, &e); err != nil || e.Code == "" {
		n, _ := strconv.Atoi(status)
		e = api.Error{Code: api.CodeForStatus(n)}
	}
	if e.Message == "" {
		e.Message = m.Header.Get(micro.ErrorHeader)
	}
	if e.Message == "" {
		e.Message = "the node's reply was an error without a message"
	}
	return &e
}
