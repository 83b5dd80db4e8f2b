package natsauth_test

import (
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/nats-io/nats.go"
)

// TestConsumerReplyOnlyToAsker performs a subscriber's attack through a
// controller: a consumer request whose reply subject is a key of the tokens
// bucket, so that the controller (which may publish on every bucket's
// subjects) answers there and its answer is stored as that key's value. The
// controller now answers only into the asker's own inbox: nothing reaches the
// key, and the same request with the asker's inbox is answered.
func TestConsumerReplyOnlyToAsker(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	ctrl, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
	if err := transport.EnsureStreams(testutil.Context(t, 10*time.Second), ctrl.NC(), "", transport.StreamLimits{}); err != nil {
		t.Fatal(err)
	}
	stopConsumers, err := ctrl.ServeConsumers("")
	if err != nil {
		t.Fatal(err)
	}
	defer stopConsumers()
	const key = "$KV.FLEETMUX_TOKENS.admin"
	seen, err := ctrl.NC().SubscribeSync(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.NC().Flush(); err != nil {
		t.Fatal(err)
	}
	sub := f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "dash"}), nats.CustomInboxPrefix("_INBOX.subscriber.dash"))
	req := subj.Consumer(api.StreamOut, "dash", subj.All(api.KindOut, "*"))
	if err := sub.NC.PublishRequest(req, key, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	// The asker's own request after it: answered, so the one before was handled.
	if _, err := sub.NC.Request(req, []byte(`{}`), 5*time.Second); err != nil {
		t.Fatalf("the consumer request into the asker's inbox: %v", err)
	}
	if m, err := seen.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a controller answered a subscriber onto %s: %q", key, m.Data)
	}
}
