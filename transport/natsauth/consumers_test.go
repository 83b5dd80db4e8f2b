package natsauth_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// TestAuthSubscriberConsumersAreItsOwn performs the attacks of the security reviews
// on the JetStream consumers. A full subscriber creates a consumer whose deliver
// subject is $FLEETMUX.DISCONNECT (nats-server checks the create subject, never the
// body's deliver subject: every output chunk would be published there, where the
// controller reads disconnect advisories), by the filtered, the durable and the
// legacy create subjects, and reads stored output by DIRECT.GET to a reply subject
// of its choosing; a subscriber narrowed to node "other" pulls node "vm"'s output
// through "dash" and audit records through a controller's consumer, reads every
// subject from the stream info, deletes "dash", asks a controller for a consumer on
// "vm" or named "dash". All of it is refused (a permissions violation), and nothing
// reaches $FLEETMUX.DISCONNECT; each subscriber reads what it may through the pull
// consumer a controller made for it, named after itself.
func TestAuthSubscriberConsumersAreItsOwn(t *testing.T) {
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
	advisories, err := ctrl.NC().SubscribeSync(natsauth.AdvisoryDisconnect)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"vm", "other"} {
		node, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: n})
		if err := node.Publish(subj.Out(n, "s1"), map[string]string{api.HeaderOffset: "0"}, []byte(n+"-output")); err != nil {
			t.Fatal(err)
		}
		if err := node.Publish(subj.Audit(n), nil, []byte(`{"secret":"audit"}`)); err != nil {
			t.Fatal(err)
		}
		if err := node.NC().Flush(); err != nil {
			t.Fatal(err)
		}
	}
	jsCtl, err := jetstream.New(ctrl.NC())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{api.StreamEvents, api.StreamAudit} {
		if _, err := jsCtl.CreateOrUpdateConsumer(testutil.Context(t, 5*time.Second), s, jetstream.ConsumerConfig{Durable: "ops", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatalf("controller's consumer on %s: %v", s, err)
		}
	}

	full := f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "dash"}), nats.CustomInboxPrefix("_INBOX.subscriber.dash"))
	// A controller makes "dash" for it.
	if r := mustConsumer(t, full, api.StreamOut, "dash", subj.All(api.KindOut, "*"), api.ConsumerRequest{}); r.NumPending != 2 {
		t.Fatalf("dash: %+v, want 2 pending", r)
	}
	jsFull, err := jetstream.New(full.NC)
	if err != nil {
		t.Fatal(err)
	}
	dash, err := jsFull.Consumer(testutil.Context(t, 5*time.Second), api.StreamOut, "dash")
	if err != nil {
		t.Fatalf("the full subscriber's own consumer: %v", err)
	}
	if info := dash.CachedInfo(); info.Config.DeliverSubject != "" || info.Config.FilterSubject != subj.All(api.KindOut, "*") {
		t.Fatalf("the consumer a controller made: %+v, want pull-only with the asked filter", info.Config)
	}

	narrow := f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "watch", Nodes: []string{"other"}}), nats.CustomInboxPrefix("_INBOX.subscriber.watch"))
	pull := "_INBOX.subscriber.watch.pull"
	if _, err := narrow.NC.SubscribeSync(pull); err != nil {
		t.Fatal(err)
	}
	narrow.NoErrors(t)
	attack := func(cl *testutil.NATSClient, subject, body string) {
		t.Run(subject, func(t *testing.T) {
			if err := cl.NC.PublishRequest(subject, pull, []byte(body)); err != nil {
				t.Fatal(err)
			}
			cl.Violation(t, subject)
		})
	}
	evil := `{"stream_name":"FLEETMUX_OUT","config":{"durable_name":"dash","filter_subject":"fleetmux.out.vm.s1","deliver_subject":"$FLEETMUX.DISCONNECT","deliver_policy":"all"}}`
	attack(full, "$JS.API.CONSUMER.CREATE."+api.StreamOut+".dash."+subj.Out("vm", "s1"), evil)
	attack(full, "$JS.API.CONSUMER.CREATE."+api.StreamOut+".dash."+subj.All(api.KindOut, "vm"), evil)
	attack(full, "$JS.API.CONSUMER.DURABLE.CREATE."+api.StreamOut+".dash", evil)
	attack(full, "$JS.API.CONSUMER.CREATE."+api.StreamOut+".dash", evil)
	attack(full, "$JS.API.DIRECT.GET."+api.StreamOut, `{"seq":1,"no_hdr":true}`)
	next := `{"batch":2,"expires":1000000000}`
	attack(narrow, "$JS.API.CONSUMER.MSG.NEXT."+api.StreamOut+".dash", next)
	attack(narrow, "$JS.API.CONSUMER.MSG.NEXT."+api.StreamEvents+".ops", next)
	attack(narrow, "$JS.API.CONSUMER.MSG.NEXT."+api.StreamAudit+".ops", next)
	attack(narrow, "$JS.API.STREAM.INFO."+api.StreamOut, `{"subjects_filter":">"}`)
	attack(narrow, "$JS.API.CONSUMER.DELETE."+api.StreamOut+".dash", "")
	attack(narrow, "$JS.API.CONSUMER.DELETE."+api.StreamEvents+".ops", "")
	attack(narrow, "$JS.API.CONSUMER.CREATE."+api.StreamOut+".watch."+subj.All(api.KindOut, "other"),
		`{"stream_name":"FLEETMUX_OUT","config":{"name":"watch","filter_subject":"fleetmux.out.other.>","deliver_subject":"$FLEETMUX.DISCONNECT"}}`)
	attack(narrow, subj.Consumer(api.StreamOut, "watch", subj.All(api.KindOut, "vm")), "{}")
	attack(narrow, subj.Consumer(api.StreamOut, "dash", subj.All(api.KindOut, "other")), "{}")
	attack(narrow, subj.Consumer(api.StreamOut, "watch", ""), "{}")
	attack(full, "$JS.API.CONSUMER.MSG.NEXT."+api.StreamAudit+".ops", next)
	attack(full, "$JS.API.CONSUMER.MSG.NEXT."+api.StreamEvents+".ops", next)
	attack(full, "$JS.API.CONSUMER.DELETE."+api.StreamEvents+".ops", "")
	attack(full, subj.Consumer(api.StreamAudit, "dash", subj.All(api.KindAudit, "vm")), "{}")
	attack(full, "$JS.API.CONSUMER.CREATE."+api.StreamAudit+".dash."+subj.All(api.KindAudit, "vm"),
		`{"stream_name":"FLEETMUX_AUDIT","config":{"name":"dash","filter_subject":"fleetmux.audit.vm"}}`)

	// "dash" is still there, unchanged, and reads both nodes' output.
	info, err := dash.Info(testutil.Context(t, 5*time.Second))
	if err != nil || info.Config.FilterSubject != subj.All(api.KindOut, "*") || info.Config.DeliverSubject != "" {
		t.Fatalf("the full subscriber's consumer after the attacks: %+v %v", info, err)
	}
	batch, err := dash.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		if err := m.Ack(); err != nil {
			t.Errorf("ack: %v", err)
		}
	}
	if len(got) != 2 || got[0] != "vm-output" || got[1] != "other-output" {
		t.Fatalf("dash read %q", got)
	}
	if m, err := advisories.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a subscriber published on %s: %q", natsauth.AdvisoryDisconnect, m.Data)
	}

	// The narrowed subscriber reads other's output through the consumer a
	// controller made for it, and removes it.
	mustConsumer(t, narrow, api.StreamOut, "watch", subj.All(api.KindOut, "other"), api.ConsumerRequest{AckPolicy: "none"})
	jsNarrow, err := jetstream.New(narrow.NC)
	if err != nil {
		t.Fatal(err)
	}
	own, err := jsNarrow.Consumer(testutil.Context(t, 5*time.Second), api.StreamOut, "watch")
	if err != nil {
		t.Fatalf("the narrowed subscriber's own consumer: %v", err)
	}
	m, err := own.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || string(m.Data()) != "other-output" {
		t.Fatalf("the narrowed subscriber read %v %v", m, err)
	}
	if err := jsNarrow.DeleteConsumer(testutil.Context(t, 5*time.Second), api.StreamOut, "watch"); err != nil {
		t.Fatalf("delete its own consumer: %v", err)
	}
	narrow.NoErrors(t)
}

// TestAccountBoundsStreamsAndConsumers: the fleet account caps how many streams it
// keeps and how many consumers a stream holds.
func TestAccountBoundsStreamsAndConsumers(t *testing.T) {
	a, err := natsauth.InitAuthority(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := a.AccountJWT()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	if l := ac.Limits.JetStreamLimits; l.Streams <= 0 || l.Consumer <= 0 {
		t.Fatalf("account limits %+v: streams and consumers unbounded", l)
	}
}

// mustConsumer asks a controller (ServeConsumers) for the consumer name on stream
// with filter, as cl, and returns the reply.
func mustConsumer(t *testing.T, cl *testutil.NATSClient, stream, name, filter string, req api.ConsumerRequest) api.ConsumerReply {
	t.Helper()
	body, _ := json.Marshal(req)
	m, err := cl.NC.Request(subj.Consumer(stream, name, filter), body, 10*time.Second)
	if err != nil {
		t.Fatalf("consumer request %s/%s: %v", stream, name, err)
	}
	var r api.ConsumerReply
	if m.Header.Get(micro.ErrorCodeHeader) != "" || json.Unmarshal(m.Data, &r) != nil || r.Name != name {
		t.Fatalf("consumer request %s/%s: %v %s", stream, name, m.Header, m.Data)
	}
	return r
}
