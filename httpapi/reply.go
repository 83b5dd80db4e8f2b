package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/fleetmux/fleetmux/api"
)

// The API's replies and what handlers read of a request: JSON replies and
// errors, bodies, path values and queries, the actor label.

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return strings.Trim(h, "[]")
	}
	return strings.Trim(hostport, "[]")
}

// apiError turns any error into the *api.Error a user sees; what is not one is
// logged for the operator and shown as a generic internal error.
func (s *Server) apiError(r *http.Request, err error) *api.Error {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, context.Canceled) && s.ctx.Err() != nil:
		return api.Errorf(api.CodeUnavailable, "the controller is shutting down")
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return api.Errorf(api.CodeTimeout, "request cancelled")
	}
	s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	return api.Errorf(api.CodeInternal, "internal error (details in the controller's log)")
}

func writeError(w http.ResponseWriter, e *api.Error) { writeErrorStatus(w, api.HTTPStatus(e.Code), e) }

func writeErrorStatus(w http.ResponseWriter, code int, e *api.Error) {
	noteError(w, e.Code)
	writeJSON(w, code, api.ErrorReply{Error: e})
}

// rawJSON is a JSON object written as it is (a node's reply passed on).
type rawJSON = json.RawMessage

func writeJSON(w http.ResponseWriter, code int, v any) {
	var b []byte
	var err error
	if raw, ok := v.(rawJSON); ok {
		b = slices.Clip(raw) // the newline below must not write into the caller's array
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		code = http.StatusInternalServerError
		noteError(w, api.CodeInternal)
		b, _ = json.Marshal(api.ErrorReply{Error: api.Errorf(api.CodeInternal, "reply not encodable")})
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b))) // so a Flush before the handler returns need not chunk it
	w.WriteHeader(code)
	w.Write(b)
}

// reply writes v, or the error.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		writeError(w, s.apiError(r, err))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// decodeBody decodes a JSON body into v: a JSON content type, at most
// api.MaxBodyBytes, no unknown fields, one value.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return api.Errorf(api.CodeBadRequest, "content type %q: send application/json", ct)
		}
	} else {
		return api.Errorf(api.CodeBadRequest, "no content type: send application/json")
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, api.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return api.Errorf(api.CodeTooLarge, "request body over %d bytes", api.MaxBodyBytes)
		}
		if errors.Is(err, io.EOF) {
			return api.Errorf(api.CodeBadRequest, "empty request body: want a JSON object")
		}
		return api.Errorf(api.CodeBadRequest, "malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return api.Errorf(api.CodeTooLarge, "request body over %d bytes", api.MaxBodyBytes)
		}
		return api.Errorf(api.CodeBadRequest, "malformed JSON body: more than one value")
	}
	return nil
}

// actor names who made a request, for the nodes' audit records: the API user (a
// client-chosen label, bounded and cleaned) and the remote address.
func actor(r *http.Request) string {
	who := r.Header.Get(api.HeaderActor)
	if len(who) > 64 {
		who = who[:64]
	}
	who = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, who)
	if who == "" {
		who = "api"
	}
	host := hostOnly(r.RemoteAddr)
	return who + "@" + host
}

// target validates the {node} and {id} of a session route.
func target(r *http.Request) (node, id string, err error) {
	node, id = r.PathValue("node"), r.PathValue("id")
	if err := api.ValidName(node); err != nil {
		return "", "", api.Errorf(api.CodeBadRequest, "node: %v", err)
	}
	if err := api.ValidName(id); err != nil {
		return "", "", api.Errorf(api.CodeBadRequest, "session: %v", err)
	}
	return node, id, nil
}

// queryInt reads an optional non-negative integer query parameter.
func queryInt(r *http.Request, name string) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return 0, nil
	}
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil || v < 0 || fmt.Sprint(v) != s {
		return 0, api.Errorf(api.CodeBadRequest, "query %s=%q: want a non-negative integer", name, s)
	}
	return v, nil
}

// slogPrinter adapts the server's logger to promhttp's error log.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics", "err", fmt.Sprint(v...)) }
