package api

import (
	"net/http"
	"slices"
)

// statuses pairs each error code that an HTTP reply carries with its status: the
// one table behind HTTPStatus (the controller's replies) and CodeForStatus (the
// client's reading of replies without a code). Codes that share a status come in
// the order CodeForStatus prefers them.
var statuses = []struct {
	code   string
	status int
}{
	{CodeBadRequest, http.StatusBadRequest},
	{CodeUnauthorized, http.StatusUnauthorized},
	{CodeForbidden, http.StatusForbidden},
	{CodeDenied, http.StatusForbidden},
	{CodeSandbox, http.StatusForbidden},
	{CodeNotFound, http.StatusNotFound},
	{CodeBusy, http.StatusConflict},
	{CodeExited, http.StatusConflict},
	{CodeExists, http.StatusConflict},
	{CodeHeld, http.StatusConflict},
	{CodeGone, http.StatusGone},
	{CodeTooLarge, http.StatusRequestEntityTooLarge},
	{CodeLimit, http.StatusTooManyRequests},
	{CodeInternal, http.StatusInternalServerError},
	{CodeUnavailable, http.StatusServiceUnavailable},
	{CodeUnavailable, http.StatusBadGateway}, // a proxy's: never sent for a code
	{CodeTimeout, http.StatusGatewayTimeout},
}

// HTTPStatus is the HTTP status of an error reply with the given code; 500 for a
// code it does not know.
func HTTPStatus(code string) int {
	for _, s := range statuses {
		if s.code == code {
			return s.status
		}
	}
	return http.StatusInternalServerError
}

// CodeForStatus is the error code that goes with an HTTP status, for a reply that
// carries none (from a proxy, or cut short): the code HTTPStatus maps to it, else
// CodeBadRequest for any other 4xx and CodeInternal for anything else.
func CodeForStatus(status int) string {
	for _, s := range statuses {
		if s.status == status {
			return s.code
		}
	}
	if status >= 400 && status < 500 {
		return CodeBadRequest
	}
	return CodeInternal
}

// ErrorCodes lists every error code an API reply may carry, once each, in the order
// of the status table.
func ErrorCodes() []string {
	var out []string
	for _, s := range statuses {
		if !slices.Contains(out, s.code) {
			out = append(out, s.code)
		}
	}
	return out
}
