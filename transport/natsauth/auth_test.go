package natsauth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var subj = api.Subjects{}

func TestAuthRefusesAnonymousTokenAndPassword(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	ca := filepath.Join(f.Dir, natsauth.AuthorityDir, natsauth.CACertFile)
	for name, opt := range map[string]nats.Option{
		"anonymous":     func(*nats.Options) error { return nil },
		"token":         nats.Token("s3cret"),
		"user/password": nats.UserInfo("admin", "admin"),
	} {
		nc, err := nats.Connect(f.Srv.ClientURL(), opt, nats.RootCAs(ca), nats.NoReconnect())
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
			continue
		}
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}
	// Without TLS the server does not even get to the credentials.
	credsFile := f.Creds(natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "dash"})
	if nc, err := nats.Connect(f.Srv.ClientURL(), nats.UserCredentials(credsFile), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Error("connected without verifying the server against the fleet's CA")
	}
	// transport.Connect refuses to talk to a server beyond loopback without TLS.
	_, err := transport.Connect(testutil.Context(t, time.Second), transport.NATSConfig{URL: "nats://192.0.2.1:4222", Logger: testutil.Logger()})
	if !errors.Is(err, transport.ErrInsecure) {
		t.Errorf("plain nats beyond loopback: %v", err)
	}
}

// nodeServer serves every node verb on <p>.rpc.<name>.run with node creds and
// records what it ran.
type nodeServer struct {
	mu  sync.Mutex
	ran []string
}

func (n *nodeServer) serve(t *testing.T, conn *transport.Conn, name string) {
	t.Helper()
	_, err := conn.Serve(api.ServiceName, "0.1.0", map[string]string{"run": subj.RPC(name, "run")},
		func(_ context.Context, _, _ string, _ map[string]string, data []byte) ([]byte, *api.Error) {
			n.mu.Lock()
			n.ran = append(n.ran, string(data))
			n.mu.Unlock()
			return []byte("ran " + string(data)), nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

func (n *nodeServer) runs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.ran...)
}

func TestAuthSubscriberReadsButNeverRuns(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	nodeConn, nodeLog := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "web-1"})
	var ns nodeServer
	ns.serve(t, nodeConn, "web-1")
	ctrl, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
	if err := transport.EnsureStreams(testutil.Context(t, 10*time.Second), ctrl.NC(), "", transport.StreamLimits{}); err != nil {
		t.Fatalf("streams with controller creds: %v", err)
	}
	// A client of the subscriber's own sets its inbox prefix (nats CLI --inbox-prefix).
	sub := f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "dash"}), nats.CustomInboxPrefix("_INBOX.subscriber.dash"))

	// Output: core subscription works.
	outs, err := sub.NC.SubscribeSync(subj.All(api.KindOut, "*"))
	if err != nil {
		t.Fatal(err)
	}
	// rpc: neither publish nor subscribe.
	spy, err := sub.NC.SubscribeSync(subj.All(api.KindRPC, "*"))
	if err != nil {
		t.Fatal(err)
	}
	sub.Violation(t, subj.All(api.KindRPC, "*"))
	if err := sub.NC.Publish(subj.RPC("web-1", "run"), []byte("id")); err != nil {
		t.Fatal(err)
	}
	sub.Violation(t, subj.RPC("web-1", "run"))
	if _, err := sub.NC.Request(subj.RPC("web-1", "run"), []byte("id"), time.Second); err == nil {
		t.Fatal("a subscriber's request got an answer")
	}

	// A controller's request goes through; the subscriber's never reached the node.
	reply, err := ctrl.Request(testutil.Context(t, 5*time.Second), subj.RPC("web-1", "run"), nil, []byte("echo ok"))
	if err != nil || string(reply) != "ran echo ok" {
		t.Fatalf("controller request: %q %v", reply, err)
	}
	if got := ns.runs(); len(got) != 1 || got[0] != "echo ok" {
		t.Fatalf("the node ran %q, want only the controller's request", got)
	}
	if m, err := spy.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("the subscriber saw an rpc request: %q", m.Data)
	}

	if err := nodeConn.Publish(subj.Out("web-1", "s1"), map[string]string{api.HeaderOffset: "0"}, []byte("hello\x00\xff")); err != nil {
		t.Fatal(err)
	}
	m, err := outs.NextMsg(5 * time.Second)
	if err != nil || string(m.Data) != "hello\x00\xff" || m.Subject != subj.Out("web-1", "s1") {
		t.Fatalf("output: %v %v", m, err)
	}

	// JetStream: the subscriber replays output from the stream (through the
	// consumer named after itself), but cannot read the audit records.
	js, err := jetstream.New(sub.NC)
	if err != nil {
		t.Fatal(err)
	}
	stopConsumers, err := ctrl.ServeConsumers("")
	if err != nil {
		t.Fatal(err)
	}
	defer stopConsumers()
	mustConsumer(t, sub, api.StreamOut, "dash", subj.All(api.KindOut, "web-1"), api.ConsumerRequest{})
	cons, err := js.Consumer(testutil.Context(t, 5*time.Second), api.StreamOut, "dash")
	if err != nil {
		t.Fatalf("consumer on %s: %v", api.StreamOut, err)
	}
	jm, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || string(jm.Data()) != "hello\x00\xff" {
		t.Fatalf("replayed output: %v %v", jm, err)
	}
	if err := nodeConn.Publish(subj.Audit("web-1"), nil, []byte(`{"secret":"audit"}`)); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{api.StreamEvents, api.StreamAudit} {
		for _, filter := range []string{subj.Audit("web-1"), "fleetmux.>", ""} {
			cfg := jetstream.ConsumerConfig{Name: "dash", FilterSubject: filter, DeliverPolicy: jetstream.DeliverAllPolicy}
			if _, err := js.CreateConsumer(testutil.Context(t, time.Second), stream, cfg); err == nil {
				t.Errorf("a subscriber created a consumer on %s with filter %q", stream, filter)
			}
		}
	}
	mustConsumer(t, sub, api.StreamEvents, "dash", subj.All(api.KindBlock, "*"), api.ConsumerRequest{})
	if s := nodeLog.String(); strings.Contains(s, "async error") {
		t.Errorf("the node's connection had async errors:\n%s", s)
	}
}

func TestAuthNodeKeepsToItsOwnSubjects(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	ctrl, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
	var nsB nodeServer
	nodeB, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "b"})
	nsB.serve(t, nodeB, "b")
	a := f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindNode, Name: "a"}))

	outs := make(chan string, 16)
	stop, err := ctrl.Subscribe(subj.All(api.KindOut, "*"), func(s string, _ map[string]string, _ []byte) { outs <- s })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	spy, err := a.NC.SubscribeSync(subj.All(api.KindRPC, "b"))
	if err != nil {
		t.Fatal(err)
	}
	a.Violation(t, subj.All(api.KindRPC, "b"))
	if err := a.NC.Publish(subj.RPC("b", "run"), []byte("id")); err != nil {
		t.Fatal(err)
	}
	a.Violation(t, subj.RPC("b", "run"))
	if err := a.NC.Publish(subj.Out("b", "x"), []byte("forged")); err != nil {
		t.Fatal(err)
	}
	a.Violation(t, subj.Out("b", "x"))
	for _, s := range []string{subj.Block("b", "x"), subj.Audit("b"), subj.All(api.KindOut, "*")} {
		if err := a.NC.Publish(s, []byte("forged")); err != nil {
			t.Fatal(err)
		}
		a.Violation(t, s)
	}
	// Its own output goes through, after the forged one: the controller sees only it.
	if err := a.NC.Publish(subj.Out("a", "s1"), []byte("mine")); err != nil {
		t.Fatal(err)
	}
	a.NoErrors(t)
	select {
	case s := <-outs:
		if s != subj.Out("a", "s1") {
			t.Fatalf("the controller got %s", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("node a's own output did not arrive")
	}
	// The controller reaches b; b ran nothing else, and a saw none of it.
	if _, err := ctrl.Request(testutil.Context(t, 5*time.Second), subj.RPC("b", "run"), nil, []byte("true")); err != nil {
		t.Fatal(err)
	}
	if got := nsB.runs(); len(got) != 1 || got[0] != "true" {
		t.Fatalf("node b ran %q", got)
	}
	if m, err := spy.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("node a saw b's request %q", m.Data)
	}
	select {
	case s := <-outs:
		t.Fatalf("the controller got %s", s)
	default:
	}
}

// TestAuthNodeWatchesPolicyBucket: a node reads the policy bucket (gets, and the
// key's subject), and may create no consumer on it: a consumer's creator picks
// where JetStream delivers (its body's deliver subject, which nats-server never
// checks), so a node could have had the policy's changes published on any subject.
func TestAuthNodeWatchesPolicyBucket(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	ctrl, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
	cjs, err := jetstream.New(ctrl.NC())
	if err != nil {
		t.Fatal(err)
	}
	var kvs = map[string]jetstream.KeyValue{}
	for _, b := range []string{api.BucketPolicy, api.BucketTokens, api.BucketApprovals} {
		kv, err := cjs.CreateKeyValue(testutil.Context(t, 10*time.Second), jetstream.KeyValueConfig{Bucket: b})
		if err != nil {
			t.Fatalf("controller creates %s: %v", b, err)
		}
		kvs[b] = kv
	}
	if _, err := kvs[api.BucketPolicy].Put(testutil.Context(t, 5*time.Second), "current", []byte("version: 1")); err != nil {
		t.Fatal(err)
	}
	if _, err := kvs[api.BucketTokens].Put(testutil.Context(t, 5*time.Second), "admin", []byte("hash")); err != nil {
		t.Fatal(err)
	}

	node := f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindNode, Name: "a"}), nats.CustomInboxPrefix("_INBOX.node.a"))
	js, err := jetstream.New(node.NC)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(testutil.Context(t, 5*time.Second), api.BucketPolicy)
	if err != nil {
		t.Fatalf("node opens the policy bucket: %v", err)
	}
	e, err := kv.Get(testutil.Context(t, 5*time.Second), "current")
	if err != nil || string(e.Value()) != "version: 1" {
		t.Fatalf("node gets the policy: %v %v", e, err)
	}
	// The node makes no consumer, so none that delivers where it likes (the
	// bucket's changes onto the advisory subject, say): it watches by subscribing
	// to the key's subject and getting the key again (transport.Policy).
	changes, err := node.NC.SubscribeSync("$KV." + api.BucketPolicy + ".current")
	if err != nil {
		t.Fatal(err)
	}
	node.NoErrors(t)
	if _, err := kvs[api.BucketPolicy].Put(testutil.Context(t, 5*time.Second), "current", []byte("version: 2")); err != nil {
		t.Fatal(err)
	}
	if m, err := changes.NextMsg(5 * time.Second); err != nil || string(m.Data) != "version: 2" {
		t.Fatalf("the node's subscription saw %v %v", m, err)
	}
	if e, err := kv.Get(testutil.Context(t, 5*time.Second), "current"); err != nil || string(e.Value()) != "version: 2" {
		t.Fatalf("node gets the new policy: %v %v", e, err)
	}
	node.NoErrors(t)
	for _, attack := range []struct{ subject, body string }{
		{"$JS.API.CONSUMER.CREATE.KV_" + api.BucketPolicy + ".evil.$KV." + api.BucketPolicy + ".>",
			`{"stream_name":"KV_FLEETMUX_POLICY","config":{"name":"evil","filter_subject":"$KV.FLEETMUX_POLICY.>","deliver_subject":"$FLEETMUX.DISCONNECT","deliver_policy":"all"}}`},
		{"$JS.API.CONSUMER.DURABLE.CREATE.KV_" + api.BucketPolicy + ".evil",
			`{"stream_name":"KV_FLEETMUX_POLICY","config":{"durable_name":"evil","deliver_subject":"$FLEETMUX.DISCONNECT"}}`},
		{"$JS.API.CONSUMER.CREATE.KV_" + api.BucketPolicy,
			`{"stream_name":"KV_FLEETMUX_POLICY","config":{"deliver_subject":"$FLEETMUX.DISCONNECT"}}`},
	} {
		if err := node.NC.PublishRequest(attack.subject, "_INBOX.node.a.x", []byte(attack.body)); err != nil {
			t.Fatal(err)
		}
		node.Violation(t, attack.subject)
	}
	if _, err := kv.Watch(testutil.Context(t, 2*time.Second), "current"); err == nil {
		t.Error("a node made a watch (a consumer) on the policy bucket")
	}
	// Writing the policy, or reading tokens, is not the node's business.
	if _, err := kv.Put(testutil.Context(t, time.Second), "current", []byte("rules: []")); err == nil {
		t.Error("a node wrote the policy")
	}
	if _, err := js.KeyValue(testutil.Context(t, time.Second), api.BucketTokens); err == nil {
		t.Error("a node opened the tokens bucket")
	}
}

func TestAuthNarrowedSubscriber(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	ctrl, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
	if err := transport.EnsureStreams(testutil.Context(t, 10*time.Second), ctrl.NC(), "", transport.StreamLimits{}); err != nil {
		t.Fatal(err)
	}
	sub := f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "a-only", Nodes: []string{"a"}}), nats.CustomInboxPrefix("_INBOX.subscriber.a-only"))
	if _, err := sub.NC.SubscribeSync(subj.All(api.KindOut, "a")); err != nil {
		t.Fatal(err)
	}
	sub.NoErrors(t)
	if _, err := sub.NC.SubscribeSync(subj.All(api.KindOut, "b")); err != nil {
		t.Fatal(err)
	}
	sub.Violation(t, subj.All(api.KindOut, "b"))
	js, err := jetstream.New(sub.NC)
	if err != nil {
		t.Fatal(err)
	}
	stopConsumers, err := ctrl.ServeConsumers("")
	if err != nil {
		t.Fatal(err)
	}
	defer stopConsumers()
	mustConsumer(t, sub, api.StreamOut, "a-only", subj.All(api.KindOut, "a"), api.ConsumerRequest{})
	for _, filter := range []string{subj.All(api.KindOut, "b"), subj.All(api.KindOut, "*"), ""} {
		if _, err := sub.NC.Request(subj.Consumer(api.StreamOut, "a-only", filter), nil, time.Second); err == nil {
			t.Errorf("consumer with filter %q made", filter)
		}
		sub.Violation(t, subj.Consumer(api.StreamOut, "a-only", filter))
		if _, err := js.CreateOrUpdateConsumer(testutil.Context(t, time.Second), api.StreamOut, jetstream.ConsumerConfig{Name: "a-only", FilterSubject: filter}); err == nil {
			t.Errorf("consumer with filter %q created", filter)
		}
	}
}

func TestAuthControllerSeesConnectAdvisories(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	ctrl := f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"}), nats.CustomInboxPrefix("_INBOX.controller.ctl"))
	conns, err := ctrl.NC.SubscribeSync(natsauth.AdvisoryConnect)
	if err != nil {
		t.Fatal(err)
	}
	ctrl.NoErrors(t)
	f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "web-1"})
	m, err := conns.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no connect advisory: %v", err)
	}
	if !strings.Contains(string(m.Data), `"acc":"`+f.A.Account()+`"`) || !strings.Contains(string(m.Data), "client_connect") {
		t.Errorf("not a connect advisory of the fleet account: %s", m.Data)
	}
}

func TestCredsFileRoundTrip(t *testing.T) {
	a, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Issue(natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "dash", Nodes: []string{"b", "a"}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "x.creds")
	if err := natsauth.WriteCreds(p, c); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", st.Mode(), err)
	}
	got, err := natsauth.ReadCreds(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.JWT != c.JWT || string(got.Seed) != string(c.Seed) || string(got.CA) != string(c.CA) || len(got.CA) == 0 {
		t.Fatalf("round trip changed the creds")
	}
	uc, err := got.Claims()
	if err != nil {
		t.Fatal(err)
	}
	if uc.Name != "subscriber:dash" || uc.IssuerAccount != "" || uc.Issuer != a.Account() {
		t.Errorf("claims: name %q issuer %q", uc.Name, uc.Issuer)
	}
	if natsauth.InboxOf(uc.Permissions) != "_INBOX.subscriber.dash" {
		t.Errorf("inbox %q", natsauth.InboxOf(uc.Permissions))
	}
	for _, bad := range []string{"", "garbage", strings.Replace(string(mustMarshal(t, c)), "SU", "SX", 1)} {
		if _, err := natsauth.ParseCreds([]byte(bad)); !errors.Is(err, natsauth.ErrCreds) {
			t.Errorf("parse %.20q: %v", bad, err)
		}
	}
}

func mustMarshal(t *testing.T, c *natsauth.Creds) []byte {
	t.Helper()
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzParseCreds(f *testing.F) {
	a, err := natsauth.NewAuthority()
	if err != nil {
		f.Fatal(err)
	}
	c, err := a.Issue(natsauth.Identity{Kind: natsauth.KindNode, Name: "n"})
	if err != nil {
		f.Fatal(err)
	}
	b, err := c.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n"))
	f.Add(c.CA)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := natsauth.ParseCreds(data)
		if err != nil {
			return
		}
		if _, err := c.Claims(); err != nil {
			t.Fatalf("parsed creds with bad claims: %v", err)
		}
	})
}

// TestPermissionsTable pins what each identity may and may not do, under a custom
// prefix too (pure: no server).
func TestPermissionsTable(t *testing.T) {
	type want struct{ pub, noPub, sub, noSub []string }
	for _, tc := range []struct {
		id   natsauth.Identity
		want want
	}{
		{natsauth.Identity{Kind: natsauth.KindNode, Name: "web-1"}, want{
			pub: []string{"fleetmux.out.web-1.>", "fleetmux.block.web-1.>", "fleetmux.event.web-1.>", "fleetmux.agent.web-1.>", "fleetmux.approval.web-1", "fleetmux.audit.web-1"},
			noPub: []string{"fleetmux.rpc.>", "fleetmux.out.>", "fleetmux.audit.>", "$KV.FLEETMUX_POLICY.>", "$JS.API.STREAM.CREATE.KV_FLEETMUX_POLICY", natsauth.ConnzRequest,
				"$JS.API.CONSUMER.CREATE.KV_FLEETMUX_POLICY.*.$KV.FLEETMUX_POLICY.>", "$JS.API.CONSUMER.MSG.NEXT.KV_FLEETMUX_POLICY.*"},
			sub:   []string{"fleetmux.rpc.web-1.>", "$KV.FLEETMUX_POLICY.>", "_INBOX.node.web-1.>"},
			noSub: []string{"fleetmux.rpc.>", "_INBOX.>", "$KV.FLEETMUX_TOKENS.>", "fleetmux.out.>"},
		}},
		{natsauth.Identity{Kind: natsauth.KindController, Name: "ctl", Prefix: "acme.fm"}, want{
			pub:   []string{"acme.fm.rpc.>", "acme.fm.audit.ctl", "$KV.FLEETMUX_TOKENS.>", "$JS.API.STREAM.*.FLEETMUX_OUT", natsauth.ConnzRequest},
			noPub: []string{"acme.fm.out.>", "acme.fm.audit.>", "fleetmux.rpc.>", ">"},
			sub:   []string{"acme.fm.out.>", "acme.fm.agent.>", "acme.fm.audit.>", "acme.fm.approval.>", natsauth.AdvisoryConnect, "acme.fm.consumer.>", "_INBOX.controller.ctl.>"},
			noSub: []string{"acme.fm.rpc.>", "_INBOX.>"},
		}},
		{natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "dash"}, want{
			pub: []string{"fleetmux.consumer.FLEETMUX_OUT.dash.fleetmux.out.>", "fleetmux.consumer.FLEETMUX_EVENTS.dash.fleetmux.event.>",
				"fleetmux.consumer.FLEETMUX_OUT.dash", "$JS.API.CONSUMER.MSG.NEXT.FLEETMUX_OUT.dash", "$JS.ACK.FLEETMUX_EVENTS.dash.>", "$JS.API.STREAM.INFO.FLEETMUX_OUT"},
			noPub: []string{"fleetmux.rpc.>", "$JS.API.CONSUMER.CREATE.FLEETMUX_EVENTS", "$JS.API.STREAM.MSG.GET.FLEETMUX_EVENTS", natsauth.ConnzRequest,
				"$JS.API.CONSUMER.CREATE.FLEETMUX_OUT.dash.fleetmux.out.>", "$JS.API.CONSUMER.DURABLE.CREATE.FLEETMUX_OUT.dash",
				"$JS.API.CONSUMER.CREATE.FLEETMUX_OUT.dash", "$JS.API.DIRECT.GET.FLEETMUX_OUT", "$JS.API.DIRECT.GET.FLEETMUX_OUT.>", "fleetmux.consumer.>",
				"$JS.API.CONSUMER.CREATE.FLEETMUX_OUT", "$JS.API.CONSUMER.MSG.NEXT.FLEETMUX_OUT.*", "$JS.API.CONSUMER.DELETE.FLEETMUX_OUT.*",
				"$JS.API.CONSUMER.CREATE.FLEETMUX_OUT.*.fleetmux.out.>", "$JS.API.STREAM.INFO.FLEETMUX_AUDIT", "$JS.ACK.FLEETMUX_OUT.>"},
			sub:   []string{"fleetmux.out.>", "fleetmux.block.>", "fleetmux.event.>", "fleetmux.agent.>", "_INBOX.subscriber.dash.>"},
			noSub: []string{"fleetmux.rpc.>", "fleetmux.audit.>", "_INBOX.>"},
		}},
		{natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "dash", Nodes: []string{"b", "a", "a"}}, want{
			pub: []string{"fleetmux.consumer.FLEETMUX_OUT.dash.fleetmux.out.a.>"},
			noPub: []string{"$JS.API.CONSUMER.CREATE.FLEETMUX_OUT", "$JS.API.CONSUMER.CREATE.FLEETMUX_OUT.dash.fleetmux.out.a.>", "fleetmux.consumer.FLEETMUX_OUT.dash.fleetmux.out.>",
				"fleetmux.consumer.FLEETMUX_OUT.dash", "$JS.API.DIRECT.GET.FLEETMUX_OUT",
				"$JS.API.CONSUMER.CREATE.FLEETMUX_OUT.dash", "$JS.API.STREAM.INFO.FLEETMUX_OUT"},
			sub:   []string{"fleetmux.out.a.>", "fleetmux.out.b.>", "fleetmux.event.b.>"},
			noSub: []string{"fleetmux.out.>"},
		}},
	} {
		p, err := tc.id.Permissions()
		if err != nil {
			t.Fatalf("%+v: %v", tc.id, err)
		}
		check := func(what string, list []string, want []string, present bool) {
			for _, s := range want {
				if slices.Contains(list, s) != present {
					t.Errorf("%s: %s %q: present %v, want %v", tc.id.UserName(), what, s, !present, present)
				}
			}
		}
		check("pub", p.Pub.Allow, tc.want.pub, true)
		check("pub", p.Pub.Allow, tc.want.noPub, false)
		check("sub", p.Sub.Allow, tc.want.sub, true)
		check("sub", p.Sub.Allow, tc.want.noSub, false)
		if len(p.Pub.Deny) != 0 || len(p.Sub.Deny) != 0 {
			t.Errorf("%s: deny lists (allow lists only)", tc.id.UserName())
		}
		if (p.Resp != nil) != (tc.id.Kind != natsauth.KindSubscriber) {
			t.Errorf("%s: responses %+v: nodes and controllers reply, subscribers never", tc.id.UserName(), p.Resp)
		}
	}
	for _, bad := range []natsauth.Identity{{Kind: "admin", Name: "x"}, {Kind: natsauth.KindNode, Name: "a.b"},
		{Kind: natsauth.KindNode, Name: "n", Nodes: []string{"a"}}, {Kind: natsauth.KindSubscriber, Name: "s", Nodes: []string{"*"}},
		{Kind: natsauth.KindController, Name: "c", Prefix: "a..b"}} {
		if _, err := bad.Permissions(); !errors.Is(err, natsauth.ErrIdentity) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// TestAuthRoutesMutualTLS clusters two embedded servers of one fleet (routes over
// TLS with certificates of the fleet's CA, both ways): a node's output on one
// reaches a subscriber on the other. A server of another fleet cannot join.
func TestAuthRoutesMutualTLS(t *testing.T) {
	dir := t.TempDir()
	a, err := natsauth.InitAuthority(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	clusterA := testutil.FreeAddr(t)
	start := func(auth *natsauth.Authority, name, cluster string, routes ...string) *transport.Server {
		srv, err := transport.StartServer(transport.ServerConfig{Listen: "127.0.0.1:0", Auth: auth, Name: name,
			ClusterListen: cluster, Routes: routes, Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testutil.StopNATS(t, srv) })
		return srv
	}
	srvA := start(a, "a", clusterA)
	srvB := start(a, "b", testutil.FreeAddr(t), "nats://"+clusterA)
	other, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	srvX := start(other, "x", testutil.FreeAddr(t), "nats://"+clusterA)

	connTo := func(srv *transport.Server, auth *natsauth.Authority, id natsauth.Identity) *transport.Conn {
		c, err := auth.Issue(id)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := transport.Connect(testutil.Context(t, 5*time.Second), transport.NATSConfig{URL: srv.ClientURL(), Creds: c, Logger: testutil.Logger(), DrainTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		testutil.Eventually(t, 5*time.Second, conn.Connected, "connected to %s", srv.Addr())
		return conn
	}
	got := make(chan string, 16)
	sub := connTo(srvA, a, natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "dash"})
	stop, err := sub.Subscribe(subj.All(api.KindOut, "*"), func(s string, _ map[string]string, _ []byte) { got <- s })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	node := connTo(srvB, a, natsauth.Identity{Kind: natsauth.KindNode, Name: "n1"})
	intruder := connTo(srvX, other, natsauth.Identity{Kind: natsauth.KindNode, Name: "n1"})
	// Routes come up in the background: publish until the subscriber on A gets it.
	deadline := time.Now().Add(15 * time.Second)
	for arrived := false; !arrived; {
		if time.Now().After(deadline) {
			t.Fatal("output from B never reached A over the route")
		}
		if err := intruder.Publish(subj.Out("n1", "forged"), nil, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := node.Publish(subj.Out("n1", "s1"), nil, []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-got:
			if s != subj.Out("n1", "s1") {
				t.Fatalf("A got %s", s)
			}
			arrived = true
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := intruder.Publish(subj.Out("n1", "forged"), nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := intruder.NC().Flush(); err != nil {
		t.Fatal(err)
	}
	// B's route is up and X's is not: a last message from B after X's shows only B's.
	if err := node.Publish(subj.Out("n1", "last"), nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case s := <-got:
			if s == subj.Out("n1", "forged") {
				t.Fatal("a server of another fleet joined the cluster")
			}
			if s == subj.Out("n1", "last") {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("B's last message did not arrive")
		}
	}
}
