package httpapi_test

import (
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestDigest: GET /v1/digest over a real node: a failure with its output comes
// before the successes, within the budget; the next cursor leaves out what was
// already told; scopes are checked.
func TestDigest(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	s := f.NewSession("n1")
	f.Run("n1", s.ID, "echo fine")
	f.Run("n1", s.ID, "echo broken-head; echo broken-tail; (exit 3)")
	var d api.Digest
	f.Must(200, "GET", "/v1/digest?budget_tokens=1000", nil, &d)
	fail := strings.Index(d.Text, "#2 exit 3")
	if d.Failed != 1 || d.Succeeded != 1 || fail < 0 || !strings.Contains(d.Text[fail:], "| broken-head") ||
		strings.Index(d.Text, "echo fine") < fail || d.Tokens > 1000 || d.Next == "" {
		t.Fatalf("digest:\n%s\n%+v", d.Text, d)
	}
	f.Run("n1", s.ID, "echo later")
	var d2 api.Digest
	f.Must(200, "GET", "/v1/digest?since="+d.Next+"&scope=session&session=n1/"+s.ID, nil, &d2)
	if d2.Failed != 0 || d2.Succeeded != 1 || !strings.Contains(d2.Text, "echo later") || strings.Contains(d2.Text, "broken") {
		t.Errorf("digest since next:\n%s", d2.Text)
	}
	f.APIErr(400, api.CodeBadRequest, "GET", "/v1/digest?scope=node", nil)
	f.APIErr(400, api.CodeBadRequest, "GET", "/v1/digest?since=yesterday", nil)
}
