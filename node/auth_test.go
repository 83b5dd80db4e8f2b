package node_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/trust"
)

// TestAttacksRefused is the attack of issue 14 through a real NATS server: a raw
// NATS client publishes to the node's run subject without a signature, signed by
// another root, expired, replaying a captured request, with the body of a captured
// request changed, and signed for a viewer. Each is refused with its code and
// audited, and nothing runs: the session's output offset does not move and the next
// real command is block 2.
func TestAttacksRefused(t *testing.T) {
	f := newFixture(t)
	s := f.create(api.CreateRequest{})
	f.run(s.ID, "echo ready")
	runSubj := f.subj.RPC("n1", "run")

	nc, audits := testutil.AuditSub(t, f.srv.ClientURL(), "n1")
	// Capture a real request on the wire, as anyone who may subscribe could.
	capture := testutil.Capture(t, nc, runSubj)
	f.run(s.ID, "echo captured")
	orig := capture()
	// The records of the requests so far (audits are published a little after the
	// reply) end with the captured run's.
	for seen := false; !seen; {
		select {
		case r := <-audits:
			seen = r.Detail == "echo captured"
		case <-time.After(10 * time.Second):
			t.Fatal("no audit record of the captured run")
		}
	}

	var before api.Session
	f.mustCall("get", api.SessionRequest{Session: s.ID}, &before)
	evil, _ := json.Marshal(api.RunRequest{Session: s.ID, Command: "echo pwned", TimeoutMS: 5000})
	other := testutil.NewTrust(t)
	expired, err := f.trust.Signer.SignAt(time.Now().Add(-2*time.Minute), 30*time.Second, runSubj, evil, trust.Claims{Actor: "mallory", Principal: "test:mallory", Role: api.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	viewer := f.trust.Header(t, runSubj, evil, "viewer-1", api.RoleViewer)

	for _, tc := range []struct {
		name   string
		header nats.Header
		body   []byte
		code   string
		actor  string // the verified actor audited ("" when not verified)
	}{
		{"unsigned", nats.Header{api.HeaderActor: {"admin@trusted"}}, evil, api.CodeUnauthorized, ""},
		{"another root", natsHeader(other.Header(t, runSubj, evil, "mallory", api.RoleAdmin)), evil, api.CodeUnauthorized, ""},
		{"expired", nats.Header{api.HeaderAuth: {expired}}, evil, api.CodeUnauthorized, ""},
		{"replayed", orig.Header, orig.Data, api.CodeUnauthorized, ""},
		{"body tampered", orig.Header, evil, api.CodeUnauthorized, ""},
		{"viewer runs", natsHeader(viewer), evil, api.CodeForbidden, "viewer-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := &nats.Msg{Subject: runSubj, Header: tc.header, Data: tc.body}
			reply, err := nc.RequestMsg(msg, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			// The refusal is a NATS micro service error: headers, and the api error as
			// the body.
			var e api.Error
			if err := json.Unmarshal(reply.Data, &e); err != nil || e.Code != tc.code ||
				reply.Header.Get(micro.ErrorCodeHeader) != strconv.Itoa(api.HTTPStatus(tc.code)) || reply.Header.Get(micro.ErrorHeader) == "" {
				t.Fatalf("reply %s %v, want a service error of code %s", reply.Data, reply.Header, tc.code)
			}
			select {
			case r := <-audits:
				if r.Action != "run" || r.Result != tc.code || r.Actor != tc.actor || r.Error == "" || r.Node != "n1" {
					t.Fatalf("audit record %+v", r)
				}
				if tc.name == "unsigned" && r.Claimed != "admin@trusted" {
					t.Fatalf("audit record of the unsigned request: claimed %q", r.Claimed)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("refused request not audited")
			}
			var now api.Session
			f.mustCall("get", api.SessionRequest{Session: s.ID}, &now)
			if now.OutputOffset != before.OutputOffset || now.State != api.StateIdle {
				t.Fatalf("the session moved: offset %d → %d, state %s", before.OutputOffset, now.OutputOffset, now.State)
			}
			var bl api.BlockList
			f.mustCall("blocks", api.SessionRequest{Session: s.ID}, &bl)
			if len(bl.Blocks) != 2 {
				t.Fatalf("%d blocks after the attack, want 2", len(bl.Blocks))
			}
		})
	}
	// Nothing ran in between: the next command is block 3.
	if r := f.run(s.ID, "echo after"); r.Block.N != 3 || r.Text != "after" {
		t.Fatalf("run after the attacks: block %d %q", r.Block.N, r.Text)
	}
}

// TestRolesAtTheNode: a viewer reads, an operator runs but may not close a session
// another principal created (refused naming its owner), closes its own, an admin
// closes any; a refused read is audited too.
func TestRolesAtTheNode(t *testing.T) {
	f := newFixture(t)
	s := f.create(api.CreateRequest{})
	f.role = api.RoleViewer
	f.mustCall("get", api.SessionRequest{Session: s.ID}, nil)
	if err := f.call("create", api.CreateRequest{}, nil); code(err) != api.CodeForbidden {
		t.Fatalf("viewer create: %v", err)
	}
	if err := f.call("close", api.SessionRequest{Session: s.ID}, nil); code(err) != api.CodeForbidden {
		t.Fatalf("viewer close: %v", err)
	}
	f.role, f.actor = api.RoleOperator, "agent"
	f.run(s.ID, "true")
	if err := f.call("close", api.SessionRequest{Session: s.ID}, nil); code(err) != api.CodeForbidden || !strings.Contains(err.Error(), "test:tester") {
		t.Fatalf("operator close of another's session: %v", err)
	}
	own := f.create(api.CreateRequest{})
	if own.Owner != "test:agent" {
		t.Fatalf("owner %q, want test:agent", own.Owner)
	}
	f.mustCall("close", api.SessionRequest{Session: own.ID}, nil)
	f.role, f.actor = api.RoleAdmin, ""
	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)
}

func TestNodeNeedsVerifier(t *testing.T) {
	_, err := node.New(node.Config{Name: "n1", DataDir: t.TempDir(), Bus: nopBus{}})
	if err == nil || !strings.Contains(err.Error(), "verifier") {
		t.Fatalf("node.New without a verifier: %v", err)
	}
}

func natsHeader(h map[string]string) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		out.Set(k, v)
	}
	return out
}
