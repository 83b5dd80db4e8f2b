package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/node"
)

// TestOwnerCloses: a session remembers the principal that created it; that
// operator closes it over HTTP and with MCP close_session, another operator is
// refused (forbidden, naming the owner) by the node, a viewer by the controller,
// and an admin closes anyone's.
func TestOwnerCloses(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	alice := f.newToken("alice", api.RoleOperator, "")
	bob := f.newToken("bob", api.RoleOperator, "")
	viewer := f.newToken("watcher", api.RoleViewer, "")

	var s api.Session
	f.as(alice, func() { s = f.NewSession("n1") })
	if s.Owner != "token:alice" {
		t.Fatalf("owner of alice's session: %q, want token:alice", s.Owner)
	}
	path := "/v1/sessions/n1/" + s.ID
	f.as(bob, func() {
		e := f.APIErr(http.StatusForbidden, api.CodeForbidden, "DELETE", path, nil)
		if !strings.Contains(e.Message, "token:alice") {
			t.Errorf("bob's close refused without naming the owner: %s", e.Message)
		}
		text := mcpHTTP(t, f).call("close_session", map[string]any{"node": "n1", "session": s.ID}, true, nil)
		if !strings.Contains(text, "token:alice") {
			t.Errorf("bob's close_session refused without naming the owner: %s", text)
		}
	})
	f.as(viewer, func() { f.APIErr(http.StatusForbidden, api.CodeForbidden, "DELETE", path, nil) })
	var got api.Session
	f.Must(http.StatusOK, "GET", path, nil, &got) // still there after the refusals
	f.as(alice, func() { f.Must(http.StatusOK, "DELETE", path, nil, nil) })
	f.APIErr(http.StatusNotFound, api.CodeNotFound, "GET", path, nil)

	// close_session over MCP, as the owner.
	f.as(alice, func() {
		s2 := f.NewSession("n1")
		mcpHTTP(t, f).call("close_session", map[string]any{"node": "n1", "session": s2.ID}, false, nil)
		f.APIErr(http.StatusNotFound, api.CodeNotFound, "GET", "/v1/sessions/n1/"+s2.ID, nil)
	})

	// An admin closes bob's session.
	var s3 api.Session
	f.as(bob, func() { s3 = f.NewSession("n1") })
	f.Must(http.StatusOK, "DELETE", "/v1/sessions/n1/"+s3.ID, nil, nil)
}

// TestReapExited: an exited session says when it goes (reap_at), then the node
// removes it from its list after the configured time.
func TestReapExited(t *testing.T) {
	const reap = 2 * time.Second
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil},
		Node: func(c *node.Config) { c.ReapExited = reap }})
	s := f.NewSession("n1")
	keep := f.NewSession("n1") // running: never reaped
	path := "/v1/sessions/n1/" + s.ID
	f.Must(http.StatusOK, "POST", path+"/input", []byte(`{"data":"exit 3\n"}`), nil)
	var seen api.Session
	testutil.Eventually(t, 15*time.Second, func() bool {
		code, _ := f.Do("GET", path, nil)
		if code != http.StatusOK {
			return true // reaped before it was seen: the check below fails
		}
		f.Must(http.StatusOK, "GET", path, nil, &seen)
		return seen.State == api.StateExited && seen.ReapAt != nil
	}, "session %s exited with a reap time", s.ID)
	if seen.ReapAt == nil {
		t.Fatalf("exited session gone before it showed a reap time (reap after %s)", reap)
	}
	if d := time.Until(*seen.ReapAt); d > reap {
		t.Errorf("reap_at %s is more than %s ahead", seen.ReapAt, reap)
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		code, _ := f.Do("GET", path, nil)
		return code == http.StatusNotFound
	}, "exited session %s reaped", s.ID)
	var list api.SessionList
	f.Must(http.StatusOK, "GET", "/v1/sessions", nil, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].ID != keep.ID || list.Sessions[0].ReapAt != nil {
		t.Errorf("sessions after the reap: %+v, want only %s, not to be reaped", list.Sessions, keep.ID)
	}
}
