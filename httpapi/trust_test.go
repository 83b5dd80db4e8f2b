package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
)

// TestControllerRequestReplayed: the controller signs what it sends for the API's
// principal (an admin today); a request captured on the bus and published again is
// refused by the node and audited, and does not run.
func TestControllerRequestReplayed(t *testing.T) {
	f := newFixture(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}})
	nc, recs := testutil.AuditSub(t, f.NATS.ClientURL(), "n1")
	runSubj := api.Subjects{}.RPC("n1", "run")
	capture := testutil.Capture(t, nc, runSubj)
	s := f.NewSession("n1")
	f.Run("n1", s.ID, "echo captured")
	orig := capture()
	if orig.Header.Get(api.HeaderAuth) == "" {
		t.Fatal("the controller's request carries no signature")
	}
	r := testutil.NextAudit(t, recs, "run")
	if r.Result != "ok" || r.Role != api.RoleAdmin || r.Controller != "ctl" || !strings.HasPrefix(r.Actor, "api@") {
		t.Fatalf("audit record of the API's run: %+v", r)
	}

	reply, err := nc.RequestMsg(&nats.Msg{Subject: runSubj, Header: orig.Header, Data: orig.Data}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var e api.Error // a service error: NATS micro's headers, the api error as body
	if json.Unmarshal(reply.Data, &e) != nil || e.Code != api.CodeUnauthorized || !strings.Contains(e.Message, "replayed") || reply.Header.Get("Nats-Service-Error-Code") != "401" {
		t.Fatalf("replayed request: %s %v", reply.Data, reply.Header)
	}
	if r := testutil.NextAudit(t, recs, "run"); r.Result != api.CodeUnauthorized || r.Actor != "" {
		t.Fatalf("audit record of the replay: %+v", r)
	}
	var bl api.BlockList
	f.Must(http.StatusOK, "GET", "/v1/sessions/n1/"+s.ID+"/blocks", nil, &bl)
	if len(bl.Blocks) != 1 {
		t.Fatalf("%d blocks after the replay, want 1", len(bl.Blocks))
	}
}
