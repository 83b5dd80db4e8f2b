package controller

import (
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func conns(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// TestLivenessTwoSignals: the status of each combination of the two signals.
func TestLivenessTwoSignals(t *testing.T) {
	for _, tc := range []struct {
		name      string
		gossip    string
		connected bool
		known     bool
		want      string
	}{
		{"both alive", api.NodeAlive, true, true, api.NodeAlive},
		{"gossip member without a nats identity", api.NodeAlive, false, true, api.NodeDisconnected},
		{"starved: gossip dead, still connected", api.NodeDead, true, true, api.NodeSuspect},
		{"leaving: gossip left, still draining", api.NodeLeft, true, true, api.NodeSuspect},
		{"both dead", api.NodeDead, false, true, api.NodeDead},
		{"left and gone", api.NodeLeft, false, true, api.NodeLeft},
		{"nats signal unknown: gossip alone", api.NodeAlive, false, false, api.NodeAlive},
		{"nats signal unknown: dead", api.NodeDead, false, false, api.NodeDead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(downGrace)
			tb.grace, tb.connGrace = 0, 0
			set := conns()
			if tc.connected {
				set = conns("a")
			}
			tb.present(set, tc.known)
			tb.observe(member("a", tc.gossip, 0, nil))
			st, down, _ := tb.lookup("a")
			if st != tc.want {
				t.Fatalf("status %s, want %s", st, tc.want)
			}
			if closed(down.Done()) == usable(tc.want) {
				t.Fatalf("%s: requests in flight cancelled: %v", st, closed(down.Done()))
			}
			if _, picked := tb.pick(); picked != (tc.want == api.NodeAlive) {
				t.Fatalf("%s: picked for a new session: %v", st, picked)
			}
			if sel := tb.selectNodes(nil); (len(sel) == 1) != usable(tc.want) {
				t.Fatalf("%s: selected for a fan-out: %v", st, sel)
			}
		})
	}
}

// TestLivenessConnectionCloses: a node whose NATS connection closes is suspect
// for connGrace (a reconnect in that time changes nothing), then disconnected:
// requests in flight are cancelled, long before gossip would notice; when gossip
// says dead too, it is dead.
func TestLivenessConnectionCloses(t *testing.T) {
	tb := newTable(downGrace)
	tb.connGrace = 50 * time.Millisecond
	defer tb.close()
	tb.present(conns("a", "b"), true)
	tb.observe(member("a", api.NodeAlive, 0, nil))
	tb.observe(member("b", api.NodeAlive, 0, nil))
	_, down, _ := tb.lookup("a")

	// A blip: gone and back within the grace.
	tb.present(conns("b"), true)
	if st, _, _ := tb.lookup("a"); st != api.NodeSuspect || closed(down.Done()) {
		t.Fatalf("in the grace: %s, cancelled %v", st, closed(down.Done()))
	}
	tb.present(conns("a", "b"), true)
	<-time.After(4 * tb.connGrace) // nothing may happen when the grace would have ended
	if st, _, _ := tb.lookup("a"); st != api.NodeAlive || closed(down.Done()) {
		t.Fatalf("after a blip: %s, cancelled %v", st, closed(down.Done()))
	}

	// Killed: the connection closes for good.
	start := time.Now()
	tb.present(conns("b"), true)
	<-down.Done()
	if d := time.Since(start); d < tb.connGrace || d > time.Second {
		t.Errorf("requests cancelled after %v, want after the grace of %v and within 1s", d, tb.connGrace)
	}
	if st, _, _ := tb.lookup("a"); st != api.NodeDisconnected {
		t.Fatalf("killed: %s", st)
	}
	tb.observe(member("a", api.NodeDead, 0, nil))
	if st, _, _ := tb.lookup("a"); st != api.NodeDead {
		t.Fatalf("killed, then gossip: %s", st)
	}
	// It comes back: a new connection and gossip alive.
	tb.present(conns("a", "b"), true)
	if st, _, _ := tb.lookup("a"); st != api.NodeSuspect {
		t.Fatalf("connected, gossip still dead: %s", st)
	}
	tb.observe(member("a", api.NodeAlive, 0, nil))
	st, down2, _ := tb.lookup("a")
	if st != api.NodeAlive || closed(down2.Done()) {
		t.Fatalf("back: %s, cancelled %v", st, closed(down2.Done()))
	}
}

// TestLivenessStarvedNodeKeepsServing: gossip declaring a connected node dead
// cancels nothing and keeps it selectable; gossip alive again makes it alive.
func TestLivenessStarvedNodeKeepsServing(t *testing.T) {
	tb := newTable(downGrace)
	tb.grace = 50 * time.Millisecond
	defer tb.close()
	tb.present(conns("a"), true)
	tb.observe(member("a", api.NodeAlive, 0, nil))
	_, down, _ := tb.lookup("a")
	tb.observe(member("a", api.NodeDead, 0, nil))
	<-time.After(4 * tb.grace) // the gossip-only grace would have ended: nothing changes
	if st, _, _ := tb.lookup("a"); st != api.NodeSuspect || closed(down.Done()) {
		t.Fatalf("starved: %s, cancelled %v", st, closed(down.Done()))
	}
	if sel := tb.selectNodes(nil); len(sel) != 1 {
		t.Fatalf("starved node not selectable: %v", sel)
	}
	tb.observe(member("a", api.NodeAlive, 0, nil))
	if st, _, _ := tb.lookup("a"); st != api.NodeAlive {
		t.Fatalf("recovered: %s", st)
	}
}

// TestLivenessFakeMember: a gossip member whose name no NATS identity holds is not
// listed alive, not picked, and requests to it fail at once.
func TestLivenessFakeMember(t *testing.T) {
	tb := newTable(downGrace)
	tb.present(conns("real"), true)
	tb.observe(member("real", api.NodeAlive, 5, nil))
	tb.observe(member("fake", api.NodeAlive, 0, nil)) // fewer sessions: would be picked
	for range 3 {
		if n, _ := tb.pick(); n != "real" {
			t.Fatalf("picked %q", n)
		}
	}
	for _, n := range tb.list() {
		if n.Name == "fake" && n.Status != api.NodeDisconnected {
			t.Fatalf("fake member listed %s", n.Status)
		}
	}
}

// TestLivenessGraceSurvivesOtherChanges: while a node's closed connection lingers,
// changes of other nodes do not cut its grace short.
func TestLivenessGraceSurvivesOtherChanges(t *testing.T) {
	tb := newTable(downGrace)
	tb.connGrace = time.Hour
	defer tb.close()
	tb.present(conns("a", "b"), true)
	tb.observe(member("a", api.NodeAlive, 0, nil))
	tb.present(conns("b"), true)
	tb.present(conns(), true) // b goes too
	if st, _, _ := tb.lookup("a"); st != api.NodeSuspect {
		t.Fatalf("a in its grace after another change: %s", st)
	}
}

// TestLivenessFromNATSAlone: a node gossip never told of (every seed of this
// controller is gone) but connected to NATS under its own identity is heard of,
// not listed, until it answers (a node connects before it serves); then it is
// in the table and alive, with the labels it gave; when its connection closes it
// is dead; gossip's word wins once it speaks.
func TestLivenessFromNATSAlone(t *testing.T) {
	tb := newTable(downGrace)
	tb.grace, tb.connGrace = 0, 0
	if heard := tb.present(conns("n1", "bad name"), true); len(heard) != 1 || heard[0] != "n1" {
		t.Fatalf("heard %v, want [n1]", heard)
	}
	if _, _, ok := tb.lookup("n1"); ok || !tb.stillHeard("n1") {
		t.Fatalf("n1 in the table before it answered (heard %v)", tb.stillHeard("n1"))
	}
	if heard := tb.present(conns("n1"), true); len(heard) != 0 {
		t.Fatalf("heard again: %v", heard)
	}
	tb.learned(api.NodeMeta{Name: "n1", Labels: map[string]string{"env": "ci"}, Version: "v1"})
	if st, _, ok := tb.lookup("n1"); !ok || st != api.NodeAlive {
		t.Fatalf("n1 after it answered: %q %v, want alive", st, ok)
	}
	if _, ok := tb.pick(); !ok {
		t.Fatal("n1 not picked for a new session")
	}
	if sel := tb.selectNodes(map[string]string{"env": "ci"}); len(sel) != 1 {
		t.Fatalf("n1 not selected by its labels: %v", sel)
	}
	tb.present(conns(), true)
	if st, _, _ := tb.lookup("n1"); st != api.NodeDead {
		t.Fatalf("n1 gone from NATS: %q, want dead", st)
	}
	tb.present(conns("n1"), true)
	tb.observe(member("n1", api.NodeAlive, 0, map[string]string{"env": "prod"}))
	tb.learned(api.NodeMeta{Name: "n1", Labels: map[string]string{"env": "stale"}})
	if sel := tb.selectNodes(map[string]string{"env": "prod"}); len(sel) != 1 {
		t.Fatalf("gossip's labels did not win: %v", sel)
	}
	// A node heard of that goes before it answers is never added.
	tb.present(conns("n1", "n2"), true)
	tb.present(conns("n1"), true)
	tb.learned(api.NodeMeta{Name: "n2"})
	if _, _, ok := tb.lookup("n2"); ok {
		t.Fatal("n2 added after it went")
	}
}
