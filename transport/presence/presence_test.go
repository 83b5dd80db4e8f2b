package presence_test

import (
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
	"github.com/fleetmux/fleetmux/transport/presence"
	"github.com/nats-io/nats.go"
)

// presenceLog records what a Presence watch reports.
type presenceLog struct {
	mu    sync.Mutex
	last  map[string]bool
	known bool
	calls int
	all   []map[string]bool // every report, in order
}

func (l *presenceLog) fn(set map[string]bool, known bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last, l.known = maps.Clone(set), known
	l.calls++
	l.all = append(l.all, maps.Clone(set))
}

// reports is how many reports came so far, and whether node was in each of those
// from the from-th on.
func (l *presenceLog) reports(from int, node string) (n int, alwaysIn bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	alwaysIn = true
	for _, set := range l.all[min(from, len(l.all)):] {
		alwaysIn = alwaysIn && set[node]
	}
	return len(l.all), alwaysIn
}

func (l *presenceLog) nodes() ([]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.last)), l.known
}

func (l *presenceLog) is(want ...string) func() bool {
	return func() bool {
		got, known := l.nodes()
		return known && slices.Equal(got, want)
	}
}

func watchPresence(t *testing.T, conn *transport.Conn) *presenceLog {
	t.Helper()
	l := &presenceLog{}
	stop, err := presence.New(conn, presence.Config{Logger: testutil.Logger(), Gather: 100 * time.Millisecond}).Watch(l.fn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return l
}

// TestPresenceNodesByIdentity: the controller learns which nodes hold a NATS
// connection by the name in their user JWT: those connected before it started
// (the account's connection list), those that connect later and go away (the
// advisories, at once), never a controller, a subscriber, or a client that only
// calls its connection "node:…".
func TestPresenceNodesByIdentity(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "n1"})
	// A subscriber naming its connection like a node is no node.
	f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "n9"}), nats.Name("node:n9"))
	ctl, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
	l := watchPresence(t, ctl)
	testutil.Eventually(t, 5*time.Second, l.is("n1"), "n1 listed from the connection list")

	n2, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "n2"})
	testutil.Eventually(t, 5*time.Second, l.is("n1", "n2"), "n2 connected")
	// A second connection of n2 (a reconnect elsewhere); the first one closing
	// leaves n2 connected.
	n2b, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "n2"})
	start := time.Now()
	n2.NC().Close()
	if ok := waitFor(300*time.Millisecond, func() bool { got, _ := l.nodes(); return !slices.Contains(got, "n2") }); ok {
		t.Fatal("n2 reported gone while its second connection is up")
	}
	n2b.NC().Close()
	testutil.Eventually(t, 5*time.Second, l.is("n1"), "n2's last connection closed")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the disconnect took %v to arrive", d)
	}
}

// TestPresenceForgedDisconnects performs the attack on presence: disconnect
// advisories naming node n1 (a user JWT of n1, from creds a session on n1 could
// read) for n1's and n2's real connections (their server and client ids), made to
// arrive on the advisory subject by the reply subject of a JetStream request. A
// session printed one, so it is stored in FLEETMUX_OUT, and a subscriber pulls it
// from its own consumer with that reply subject (the message keeps its headers);
// the others come by a raw direct get of a bucket entry (no headers at all). On
// the old code they made n1 and n2 "disconnected" until the next resync (30 s); now
// the first is dropped (advisories carry no headers), the one for n2's connection
// names another node, and the one for n1's only makes the server's list confirm
// it, which shows n1 still connected.
func TestPresenceForgedDisconnects(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	n1, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "n1"})
	n2, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "n2"})
	ctl, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
	if err := transport.EnsureStreams(testutil.Context(t, 10*time.Second), ctl.NC(), "", transport.StreamLimits{}); err != nil {
		t.Fatal(err)
	}
	stopConsumers, err := ctl.ServeConsumers("")
	if err != nil {
		t.Fatal(err)
	}
	defer stopConsumers()
	l := watchPresence(t, ctl)
	testutil.Eventually(t, 5*time.Second, l.is("n1", "n2"), "n1 and n2 listed")

	stolen, err := f.A.Issue(natsauth.Identity{Kind: natsauth.KindNode, Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	forge := func(conn *transport.Conn) []byte {
		cid, err := conn.NC().GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{
			"type":   "io.nats.server.advisory.v1.client_disconnect",
			"server": map[string]any{"id": conn.NC().ConnectedServerId()},
			"client": map[string]any{"id": cid, "acc": f.A.Account(), "jwt": stolen.JWT},
		})
		return b
	}
	subj := api.Subjects{}
	if err := n1.Publish(subj.Out("n1", "s1"), map[string]string{api.HeaderOffset: "0"}, forge(n1)); err != nil {
		t.Fatal(err)
	}
	if err := n1.NC().Flush(); err != nil {
		t.Fatal(err)
	}
	tokens, err := transport.OpenKV(testutil.Context(t, 10*time.Second), ctl.NC(), api.BucketTokens, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	for key, conn := range map[string]*transport.Conn{"own": n1, "other": n2} {
		if err := tokens.Put(testutil.Context(t, 5*time.Second), key, forge(conn)); err != nil {
			t.Fatal(err)
		}
	}

	sub := f.Client(f.Creds(natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "dash"}), nats.CustomInboxPrefix("_INBOX.subscriber.dash"))
	if m, err := sub.NC.Request(subj.Consumer(api.StreamOut, "dash", ""), nil, 10*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("consumer for dash: %v %v", m, err)
	}
	seen, _ := l.reports(0, "n1")
	for _, attack := range []struct {
		who     *nats.Conn
		subject string
		body    string
	}{
		{sub.NC, "$JS.API.CONSUMER.MSG.NEXT." + api.StreamOut + ".dash", `{"batch":1}`},
		{ctl.NC(), "$JS.API.DIRECT.GET.KV_" + api.BucketTokens, `{"last_by_subj":"$KV.FLEETMUX_TOKENS.other","no_hdr":true}`},
		{ctl.NC(), "$JS.API.DIRECT.GET.KV_" + api.BucketTokens, `{"last_by_subj":"$KV.FLEETMUX_TOKENS.own","no_hdr":true}`},
	} {
		if err := attack.who.PublishRequest(attack.subject, natsauth.AdvisoryDisconnect, []byte(attack.body)); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever came of them has come once a list of our own has come back.
	if _, err := ctl.Request(testutil.Context(t, 5*time.Second), natsauth.ConnzRequest, nil, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(time.Second, func() bool { n, _ := l.reports(0, "n1"); return n > seen })
	_, n1In := l.reports(seen, "n1")
	_, n2In := l.reports(seen, "n2")
	if got, _ := l.nodes(); !n1In || !n2In || !l.is("n1", "n2")() {
		t.Fatalf("forged disconnects made a node disconnected: now %v (n1 always in: %v, n2: %v)", got, n1In, n2In)
	}
	sub.NoErrors(t)
}

// TestPresenceResyncsAfterReconnect: after its own NATS outage the controller asks
// for the list again: a node that went away meanwhile (no server was there to
// send its disconnect) is gone, and one that came is there.
func TestPresenceResyncsAfterReconnect(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	n1, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "n1"})
	f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "n2"})
	ctl, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "ctl"})
	l := watchPresence(t, ctl)
	testutil.Eventually(t, 5*time.Second, l.is("n1", "n2"), "n1 and n2 listed")
	testutil.StopNATS(t, f.Srv)
	n1.NC().Close() // gone during the outage
	f.Srv = testutil.StartNATSAgain(t, f.Srv)
	testutil.Eventually(t, 10*time.Second, ctl.Connected, "controller reconnected")
	f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "n3"})
	testutil.Eventually(t, 10*time.Second, l.is("n2", "n3"), "n2 reconnected, n3 came, n1 gone")
}

// waitFor polls cond until it holds (true) or d passes (false).
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// TestNodeOfJWT: only a node's user JWT issued by the connection's account names
// a node.
func TestNodeOfJWT(t *testing.T) {
	a, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	other, err := natsauth.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	issue := func(a *natsauth.Authority, id natsauth.Identity) string {
		c, err := a.Issue(id)
		if err != nil {
			t.Fatal(err)
		}
		return c.JWT
	}
	node := issue(a, natsauth.Identity{Kind: natsauth.KindNode, Name: "web-1"})
	for _, tc := range []struct {
		name, jwt, acc, want string
	}{
		{"node", node, a.Account(), "web-1"},
		{"other account", node, other.Account(), ""},
		{"no account", node, "", ""},
		{"foreign issuer", issue(other, natsauth.Identity{Kind: natsauth.KindNode, Name: "web-1"}), a.Account(), ""},
		{"controller", issue(a, natsauth.Identity{Kind: natsauth.KindController, Name: "web-1"}), a.Account(), ""},
		{"subscriber", issue(a, natsauth.Identity{Kind: natsauth.KindSubscriber, Name: "web-1"}), a.Account(), ""},
		{"tampered", node[:len(node)-4] + "AAAA", a.Account(), ""},
		{"empty", "", a.Account(), ""},
	} {
		got, ok := natsauth.NodeOfJWT(tc.jwt, tc.acc)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: %q %v, want %q", tc.name, got, ok, tc.want)
		}
	}
}
