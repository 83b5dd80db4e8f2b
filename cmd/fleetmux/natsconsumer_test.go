package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetmux/fleetmux/api"
)

// TestDevJetStreamConsumer: on `fleetmux dev`, a nats.go client with
// subscriber.creds and its inbox prefix replays a session's output from
// JetStream the way docs/operations.md shows: it asks a controller for its
// consumer (fleetmux.consumer.FLEETMUX_OUT.<name>.<filter>), then pulls from it,
// byte for byte with the offsets in order. An ordered consumer (one the client
// makes itself) is refused, and the client hears why: a permissions violation on
// $JS.API.CONSUMER.CREATE, not a silent wait.
func TestDevJetStreamConsumer(t *testing.T) {
	addr := startDev(t)
	credsFile := filepath.Join("data", "creds", "subscriber.creds")
	nb, err := os.ReadFile(filepath.Join("data", "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	if out, errs, err := runArgs(t, "run", "--addr", addr, "here/s1", "--", "echo from-jetstream"); err != nil {
		t.Fatalf("run: %q %q %v", out, errs, err)
	}
	want := []byte(apiGet(t, addr, "/v1/sessions/here/s1/output?from=0"))
	if !bytes.Contains(want, []byte("from-jetstream")) {
		t.Fatalf("the session's output: %q", want)
	}

	violations := make(chan error, 16)
	nc, err := nats.Connect(strings.TrimSpace(string(nb)), nats.UserCredentials(credsFile), nats.RootCAs(credsFile),
		nats.CustomInboxPrefix("_INBOX.subscriber.subscriber"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case violations <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect with subscriber.creds: %v", err)
	}
	defer nc.Close()

	// As docs/operations.md shows it ("dev"'s subscriber is named "subscriber").
	m, err := nc.Request("fleetmux.consumer.FLEETMUX_OUT.subscriber.fleetmux.out.here.>", []byte(`{"ack_policy":"none"}`), 5*time.Second)
	if err != nil {
		t.Fatalf("the consumer request: %v", err)
	}
	var rep api.ConsumerReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Name != "subscriber" || rep.Stream != api.StreamOut {
		t.Fatalf("the consumer reply: %s (%v)", m.Data, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, "FLEETMUX_OUT", "subscriber")
	if err != nil {
		t.Fatalf("the subscriber's consumer: %v", err)
	}
	var got []byte
	for len(got) < len(want) {
		msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("pull after %d of %d bytes: %v", len(got), len(want), err)
		}
		if off, _ := strconv.Atoi(msg.Headers().Get(api.HeaderOffset)); off != len(got) {
			t.Fatalf("a message at offset %d after %d bytes", off, len(got))
		}
		got = append(got, msg.Data()...)
	}
	if !bytes.Equal(got[:len(want)], want) {
		t.Fatalf("the consumer gave %q, the session's output is %q", got, want)
	}

	// An ordered consumer: the client creates it itself, which a subscriber may
	// not do (it could aim the deliveries anywhere).
	// nats.go tries again until its context ends; the error handler hears why.
	octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
	defer ocancel()
	oc, err := js.OrderedConsumer(octx, "FLEETMUX_OUT", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"fleetmux.out.here.>"}})
	if err == nil {
		_, err = oc.Next(jetstream.FetchMaxWait(2 * time.Second))
	}
	if err == nil {
		t.Fatal("an ordered consumer read the stream")
	}
	select {
	case v := <-violations:
		if !errors.Is(v, nats.ErrPermissionViolation) || !strings.Contains(v.Error(), "$JS.API.CONSUMER.CREATE.FLEETMUX_OUT") {
			t.Fatalf("the client heard %v, want a permissions violation on $JS.API.CONSUMER.CREATE.FLEETMUX_OUT", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the ordered consumer failed (%v) and the client heard no permissions violation", err)
	}
}
