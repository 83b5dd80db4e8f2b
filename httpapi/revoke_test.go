package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/trust"
)

// TestRevokedTokenEndsItsStreams: revoking a token ends what it has open, not only
// its next request. An operator's attach opened before the revocation can no longer
// type (the input never reaches the shell), and a viewer's follow stream opened
// before it gets no output made after it.
func TestRevokedTokenEndsItsStreams(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Store: true})
	s := f.NewSession("n1")
	f.Run("n1", s.ID, "echo before")
	path := "/v1/sessions/n1/" + s.ID
	op := f.newToken("o2", api.RoleOperator, "")
	viewer := f.newToken("v2", api.RoleViewer, "")

	// The operator's attach, and the viewer's follow stream, both open and working.
	var ws *wsConn
	f.as(op, func() { ws = f.dialAttach(t, path) })
	defer ws.Close()
	var (
		mu   sync.Mutex
		msgs []api.AttachMsg
	)
	go func() {
		for {
			var fr wsFrame
			if ws.receive(&fr) != nil {
				return
			}
			if fr.typ == websocket.MessageText {
				var m api.AttachMsg
				json.Unmarshal(fr.data, &m)
				mu.Lock()
				msgs = append(msgs, m)
				mu.Unlock()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.Base+path+"/output?follow=1", nil)
	req.Header.Set("Authorization", "Bearer "+viewer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("viewer's follow: %v %v", resp, err)
	}
	defer resp.Body.Close()
	var (
		fmu      sync.Mutex
		followed strings.Builder
		ended    = make(chan struct{})
	)
	go func() {
		defer close(ended)
		r := bufio.NewReader(resp.Body)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			fmu.Lock()
			followed.Write(buf[:n])
			fmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	has := func(s string) func() bool {
		return func() bool { fmu.Lock(); defer fmu.Unlock(); return strings.Contains(followed.String(), s) }
	}
	f.Run("n1", s.ID, "echo live-$((1+1))")
	testutil.Eventually(t, 10*time.Second, has("live-2"), "the viewer's follow stream")

	// Revoked: refused at once for new requests.
	f.Must(http.StatusOK, "DELETE", "/v1/tokens/o2", nil, nil)
	f.Must(http.StatusOK, "DELETE", "/v1/tokens/v2", nil, nil)
	f.as(op, func() { f.APIErr(http.StatusUnauthorized, api.CodeUnauthorized, "GET", path, nil) })

	// The open attach can no longer type: it gets unauthorized, and the shell never
	// sees the line. (Output that came after the revocation may have told the
	// attach first: then the server closed it, and the line cannot even be sent.)
	if err := ws.send([]byte("echo AFTER_REVOKE_$((6*7))\r")); err != nil && !errors.Is(err, net.ErrClosed) && websocket.CloseStatus(err) == -1 {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if m.Type == api.AttachError && m.Error != nil && m.Error.Code == api.CodeUnauthorized {
				return true
			}
		}
		return false
	}, "the attach told its token is revoked")

	// Output made after the revocation never reaches the viewer's stream: it ends.
	r := f.Run("n1", s.ID, "echo SECRET_AFTER_$((2+2))")
	if strings.Contains(r.Text, "AFTER_REVOKE_42") {
		t.Fatalf("the revoked attach's input reached the shell: %q", r.Text)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked viewer's follow stream is still open")
	}
	if has("SECRET_AFTER_4")() {
		t.Fatal("the revoked viewer's stream received output made after the revocation")
	}
	var blocks api.BlockList
	f.Must(http.StatusOK, "GET", path+"/blocks", nil, &blocks)
	for _, b := range blocks.Blocks {
		if strings.Contains(b.Command, "AFTER_REVOKE") {
			t.Fatalf("the revoked attach's line ran as block %d", b.N)
		}
	}
}

// TestBootstrapPrincipalApart (second review, F2): the bootstrap token is
// token:bootstrap in the audit even when its text carries a name (dev's is "dev")
// that a stored token also has; the two were recorded alike.
func TestBootstrapPrincipalApart(t *testing.T) {
	boot, _, err := trust.NewToken("dev", api.RoleAdmin, 0, "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	f := newFixture(t, stack.Options{Token: boot, Store: true, Config: func(c *controller.Config) { c.AuditFile = audit }})
	viewer := f.newToken("dev", api.RoleViewer, "")
	f.APIErr(http.StatusNotFound, api.CodeNotFound, "POST", "/v1/sessions", api.NewSession{Node: "nope"})
	f.as(viewer, func() {
		f.APIErr(http.StatusForbidden, api.CodeForbidden, "POST", "/v1/sessions", api.NewSession{Node: "nope"})
	})
	testutil.Eventually(t, 10*time.Second, func() bool {
		for _, r := range testutil.AuditRecords(t, audit) {
			if r.Action == "POST /v1/sessions" && r.Principal == "token:bootstrap" {
				return true
			}
		}
		return false
	}, "the bootstrap token's audit record as token:bootstrap (not token:dev)")
}
