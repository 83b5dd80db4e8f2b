package api

import (
	"net/http"
	"testing"
)

func TestHTTPStatus(t *testing.T) {
	for code, want := range map[string]int{
		CodeBadRequest: 400, CodeUnauthorized: 401, CodeForbidden: 403, CodeNotFound: 404,
		CodeBusy: 409, CodeExited: 409, CodeGone: 410, CodeTooLarge: 413, CodeLimit: 429,
		CodeInternal: 500, CodeUnavailable: 503, CodeTimeout: 504, "no-such-code": 500,
	} {
		if got := HTTPStatus(code); got != want {
			t.Errorf("HTTPStatus(%q) = %d, want %d", code, got, want)
		}
	}
}

func TestCodeForStatus(t *testing.T) {
	for status, want := range map[int]string{
		400: CodeBadRequest, 401: CodeUnauthorized, 403: CodeForbidden, 404: CodeNotFound,
		405: CodeBadRequest, 409: CodeBusy, 410: CodeGone, 413: CodeTooLarge, 422: CodeBadRequest,
		429: CodeLimit, 500: CodeInternal, 502: CodeUnavailable, 503: CodeUnavailable,
		504: CodeTimeout, 418: CodeBadRequest, 501: CodeInternal, 200: CodeInternal,
	} {
		if got := CodeForStatus(status); got != want {
			t.Errorf("CodeForStatus(%d) = %q, want %q", status, got, want)
		}
	}
	// Every code a reply carries survives the round trip, but for codes that
	// share a status with an earlier one.
	for _, s := range statuses {
		if got := HTTPStatus(CodeForStatus(s.status)); got != s.status && s.status != http.StatusBadGateway {
			t.Errorf("round trip of %d: %d", s.status, got)
		}
	}
}
