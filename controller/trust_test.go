package controller_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
)

// auditSub subscribes to a node's audit records with a raw NATS client.
func auditSub(t *testing.T, f *fixture, node string) (*nats.Conn, chan api.AuditRecord) {
	t.Helper()
	nc, err := nats.Connect(f.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	recs := make(chan api.AuditRecord, 64)
	if _, err := nc.Subscribe(api.Subjects{}.Audit(node), func(m *nats.Msg) {
		var r api.AuditRecord
		if json.Unmarshal(m.Data, &r) == nil {
			recs <- r
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc, recs
}

// nextAudit waits for the next record of action.
func nextAudit(t *testing.T, recs chan api.AuditRecord, action string) api.AuditRecord {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-recs:
			if r.Action == action {
				return r
			}
		case <-deadline:
			t.Fatalf("no audit record of %s", action)
		}
	}
}

// TestControllerRequestReplayed: the controller signs what it sends for the API's
// principal (an admin today); a request captured on the bus and published again is
// refused by the node and audited, and does not run.
func TestControllerRequestReplayed(t *testing.T) {
	f := newFixture(t, fixtureOpts{nodes: map[string]map[string]string{"n1": nil}})
	nc, recs := auditSub(t, f, "n1")
	runSubj := api.Subjects{}.RPC("n1", "run")
	captured := make(chan *nats.Msg, 1)
	spy, err := nc.Subscribe(runSubj, func(m *nats.Msg) {
		select {
		case captured <- m:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s := f.newSession("n1")
	f.run("n1", s.ID, "echo captured")
	var orig *nats.Msg
	select {
	case orig = <-captured:
	case <-time.After(10 * time.Second):
		t.Fatal("no request captured")
	}
	spy.Unsubscribe()
	if orig.Header.Get(api.HeaderAuth) == "" {
		t.Fatal("the controller's request carries no signature")
	}
	r := nextAudit(t, recs, "run")
	if r.Result != "ok" || r.Role != api.RoleAdmin || r.Controller != "ctl" || !strings.HasPrefix(r.Actor, "api@") {
		t.Fatalf("audit record of the API's run: %+v", r)
	}

	reply, err := nc.RequestMsg(&nats.Msg{Subject: runSubj, Header: orig.Header, Data: orig.Data}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var env api.ErrorReply
	if json.Unmarshal(reply.Data, &env) != nil || env.Error == nil || env.Error.Code != api.CodeUnauthorized || !strings.Contains(env.Error.Message, "replayed") {
		t.Fatalf("replayed request: %s", reply.Data)
	}
	if r := nextAudit(t, recs, "run"); r.Result != api.CodeUnauthorized || r.Actor != "" {
		t.Fatalf("audit record of the replay: %+v", r)
	}
	var bl api.BlockList
	f.must(http.StatusOK, "GET", "/v1/sessions/n1/"+s.ID+"/blocks", nil, &bl)
	if len(bl.Blocks) != 1 {
		t.Fatalf("%d blocks after the replay, want 1", len(bl.Blocks))
	}
}
