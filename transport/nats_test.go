package transport_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestPublishSubscribeWithHeaders(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	pub := connected(t, srv.ClientURL())
	sub := connected(t, srv.ClientURL())
	subject := api.Subjects{}.Out("n1", "s1")
	s, err := sub.NC().SubscribeSync(api.Subjects{}.All(api.KindOut, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.NC().Flush(); err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{api.HeaderOffset: "42", api.HeaderTime: "2026-01-02T03:04:05.123456789Z", "lower-case": "kept"}
	if err := pub.Publish(subject, hdr, []byte("hello\x00world")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := pub.Publish(subject, nil, []byte("no headers")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	m, err := s.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != subject || string(m.Data) != "hello\x00world" {
		t.Fatalf("got %s %q", m.Subject, m.Data)
	}
	for k, v := range hdr {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	m, err = s.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "no headers" || len(m.Header) != 0 {
		t.Fatalf("got %q with headers %v", m.Data, m.Header)
	}
}

// TestReconnectBuffersWhileDown stops the server, publishes while it is down, starts
// a new server on the same port and data dir, and reads everything back from the
// JetStream stream on a fresh connection: nothing published while down is lost.
func TestReconnectBuffersWhileDown(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	c := connected(t, srv.ClientURL())
	if err := transport.EnsureStreams(testutil.Context(t, 10*time.Second), c.NC(), "", transport.StreamLimits{}); err != nil {
		t.Fatal(err)
	}
	// The publisher's own subscription is sent again on reconnect, before the
	// buffered messages: it sees them too.
	own, err := c.NC().SubscribeSync("fleetmux.out.>")
	if err != nil {
		t.Fatal(err)
	}
	subject := api.Subjects{}.Out("n1", "s1")
	var want []string
	publish := func(phase string, n int) {
		t.Helper()
		for i := range n {
			body := fmt.Sprintf("%s-%03d", phase, i)
			if err := c.Publish(subject, map[string]string{api.HeaderOffset: strconv.Itoa(len(want))}, []byte(body)); err != nil {
				t.Fatalf("publish %s: %v", body, err)
			}
			want = append(want, body)
		}
	}
	publish("before", 10)
	// Core NATS publishes are not acknowledged by JetStream: the server may have
	// received a message and still not have stored it when it shuts down. Wait
	// until the stream has them (a node fills such gaps by offset with read).
	js, err := jetstream.New(c.NC())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		s, err := js.Stream(testutil.Context(t, time.Second), api.StreamOut)
		return err == nil && s.CachedInfo().State.Msgs == 10
	}, "the stream stores the first messages")

	testutil.StopNATS(t, srv)
	testutil.Eventually(t, 5*time.Second, func() bool { return !c.Connected() }, "client notices the outage")
	publish("down", 200) // buffered: no error
	srv = testutil.RestartNATS(t, srv)
	testutil.Eventually(t, 10*time.Second, c.Connected, "client reconnects")
	publish("after", 10)
	if err := c.NC().Flush(); err != nil {
		t.Fatal(err)
	}

	// The publisher's own subscription: everything from "down" on, in order.
	var ownGot []string
	for {
		m, err := own.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("own subscription after %d messages: %v", len(ownGot), err)
		}
		ownGot = append(ownGot, string(m.Data))
		if string(m.Data) == want[len(want)-1] {
			break
		}
	}
	if i := indexOf(ownGot, "down-000"); i < 0 || !equal(ownGot[i:], want[10:]) {
		t.Fatalf("own subscription got %d messages, not everything from down-000 on in order", len(ownGot))
	}

	// A fresh connection reads the stream from the start.
	fresh := connected(t, srv.ClientURL())
	js, err = jetstream.New(fresh.NC())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t, 10*time.Second)
	cons, err := js.OrderedConsumer(ctx, api.StreamOut, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < len(want) {
		batch, err := cons.Fetch(len(want)-len(got), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if h := m.Headers().Get(api.HeaderOffset); h != strconv.Itoa(len(got)) {
				t.Fatalf("message %d has offset header %q", len(got), h)
			}
			got = append(got, string(m.Data()))
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("stream has %d of %d messages", len(got), len(want))
		}
	}
	if !equal(got, want) {
		t.Fatalf("stream content differs:\n got %v\nwant %v", got, want)
	}
}

// TestConnectWhileServerDown: Connect returns a connection that is not connected yet,
// buffers, and connects once a server starts.
func TestConnectWhileServerDown(t *testing.T) {
	addr := testutil.FreeAddr(t)
	c := connect(t, "nats://"+addr)
	if c.Connected() {
		t.Fatal("connected with no server")
	}
	sub, err := c.NC().SubscribeSync("x.y")
	if err != nil {
		t.Fatalf("subscribe while down: %v", err)
	}
	buf := []byte("early")
	if err := c.Publish("x.y", map[string]string{"k": "v"}, buf); err != nil {
		t.Fatalf("publish while down: %v", err)
	}
	copy(buf, "XXXXX") // the caller owns its buffer again once Publish returns
	if err := c.Publish("x..y", nil, nil); !errors.Is(err, nats.ErrBadSubject) {
		t.Fatalf("bad subject while down: %v", err)
	}
	// A service started while the server is down answers once it is up.
	if _, err := c.Serve(api.ServiceName, "0.1.0", map[string]string{"ping": "fleetmux.rpc.early.ping"}, values(func(_ context.Context, _, _ string, h map[string]string, data []byte) []byte {
		return append([]byte(h["k"]+":"), data...)
	})); err != nil {
		t.Fatalf("serve while down: %v", err)
	}
	srv, err := transport.StartServer(transport.ServerConfig{Listen: addr, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.StopNATS(t, srv) })
	testutil.Eventually(t, 10*time.Second, c.Connected, "connects once the server is up")
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "early" || m.Header.Get("k") != "v" {
		t.Fatalf("got %q %v", m.Data, m.Header)
	}
	other := connected(t, srv.ClientURL())
	reply, err := other.Request(testutil.Context(t, 5*time.Second), "fleetmux.rpc.early.ping", map[string]string{"k": "v"}, []byte("x"))
	if err != nil || string(reply) != "v:x" {
		t.Fatalf("request to a service started while down: %q %v", reply, err)
	}
}

func TestPublishFailsWhenBufferFull(t *testing.T) {
	c, err := transport.Connect(testutil.Context(t, 5*time.Second), transport.NATSConfig{URL: "nats://" + testutil.FreeAddr(t), ReconnectBufSize: 1024, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Publish("a.b", map[string]string{"k": "v"}, make([]byte, 600)); err != nil {
		t.Fatalf("publish within the reconnect buffer: %v", err)
	}
	err = c.Publish("a.b", nil, make([]byte, 600))
	if !errors.Is(err, nats.ErrReconnectBufExceeded) {
		t.Fatalf("publish beyond the reconnect buffer: %v", err)
	}
}

func TestConnCloseIdempotent(t *testing.T) {
	srv := testutil.StartNATS(t, t.TempDir())
	c := connected(t, srv.ClientURL())
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c.Connected() {
		t.Fatal("connected after close")
	}
	if err := c.Publish("a.b", nil, nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("publish after close: %v", err)
	}
	if _, err := c.Serve(api.ServiceName, "0.1.0", map[string]string{"x": "a.x"}, values(func(_ context.Context, _, _ string, _ map[string]string, _ []byte) []byte { return nil })); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("serve after close: %v", err)
	}
}

func TestConnectConfigErrors(t *testing.T) {
	for name, cfg := range map[string]transport.NATSConfig{
		"cert without key":     {CertFile: "c.pem"},
		"creds and creds file": {Creds: &natsauth.Creds{}, CredsFile: "x.creds"},
		"bad url":              {URL: "nats://[::1"},
	} {
		if _, err := transport.Connect(testutil.Context(t, time.Second), cfg); !errors.Is(err, transport.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
