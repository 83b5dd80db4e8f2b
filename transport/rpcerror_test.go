package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// An error reply travels in NATS micro's error headers with the api error as its
// body, and only the headers make a reply an error: a value whose body looks like
// an error envelope stays a value.
func TestServeErrorsInMicroHeaders(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	server := connected(t, srv.ClientURL())
	client := connected(t, srv.ClientURL())
	held := &api.Error{Code: api.CodeHeld, Message: "held:\r\nwaits for an admin " + strings.Repeat("x", 1000), Rule: "systemctl", Approval: "n1/a7"}
	subjects := map[string]string{"fail": "fleetmux.rpc.n1.fail", "value": "fleetmux.rpc.n1.value"}
	stop, err := server.Serve(api.ServiceName, "0.1.0", subjects, func(_ context.Context, verb, _ string, _ map[string]string, _ []byte) ([]byte, *api.Error) {
		if verb == "fail" {
			return nil, held
		}
		return []byte(`{"error":{"code":"busy","message":"a value, not an error"}}`), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := server.NC().Flush(); err != nil {
		t.Fatal(err)
	}

	// What any NATS client sees.
	m, err := client.NC().Request(subjects["fail"], nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	desc := m.Header.Get(micro.ErrorHeader)
	if got := m.Header.Get(micro.ErrorCodeHeader); got != "409" {
		t.Errorf("%s = %q, want 409 (the status of %s)", micro.ErrorCodeHeader, got, api.CodeHeld)
	}
	if strings.ContainsAny(desc, "\r\n") || len(desc) > 512 || !strings.HasPrefix(desc, "held:  waits for an admin") {
		t.Errorf("%s = %q: want the message on one line, at most 512 bytes", micro.ErrorHeader, desc)
	}
	var body api.Error
	if err := json.Unmarshal(m.Data, &body); err != nil || body != *held {
		t.Errorf("body %s (%v), want the api error", m.Data, err)
	}

	// What Request makes of it.
	_, err = client.Request(testutil.Context(t, 5*time.Second), subjects["fail"], nil, nil)
	var aerr *api.Error
	if !errors.As(err, &aerr) || *aerr != *held {
		t.Fatalf("Request = %v, want %+v", err, held)
	}
	got, err := client.Request(testutil.Context(t, 5*time.Second), subjects["value"], nil, nil)
	if err != nil || !strings.Contains(string(got), "a value, not an error") {
		t.Fatalf("a value that looks like an error envelope: %q, %v", got, err)
	}
}

// A service error from a responder that is no fleetmux node (no api error in its
// body) still comes back as an *api.Error: code from the status, message from the
// header.
func TestRequestForeignServiceError(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	client := connected(t, srv.ClientURL())
	other := connected(t, srv.ClientURL())
	sub, err := other.NC().Subscribe("fleetmux.rpc.n9.get", func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set(micro.ErrorCodeHeader, "404")
		r.Header.Set(micro.ErrorHeader, "no such thing")
		r.Data = []byte("not json")
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := other.NC().Flush(); err != nil {
		t.Fatal(err)
	}
	_, err = client.Request(testutil.Context(t, 5*time.Second), "fleetmux.rpc.n9.get", nil, nil)
	var aerr *api.Error
	if !errors.As(err, &aerr) || aerr.Code != api.CodeNotFound || aerr.Message != "no such thing" {
		t.Fatalf("Request = %v, want not_found: no such thing", err)
	}
}
