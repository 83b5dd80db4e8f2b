package controller

import (
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

func member(name, state string, sessions int, labels map[string]string) Member {
	return Member{Name: name, Addr: "127.0.0.1:1", State: state, Meta: api.NodeMeta{Name: name, Sessions: sessions, Labels: labels}}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestTableTransitions(t *testing.T) {
	tb := newTable(downGrace)
	tb.grace = 0
	tb.observe(member("a", api.NodeAlive, 0, nil))
	st, down, ok := tb.lookup("a")
	if !ok || st != api.NodeAlive || closed(down.Done()) {
		t.Fatalf("alive: %v %v %v", st, ok, closed(down.Done()))
	}
	tb.suspect("a")
	if st, _, _ := tb.lookup("a"); st != api.NodeSuspect {
		t.Fatalf("after a failed request: %s, want suspect", st)
	}
	tb.ok("a")
	if st, _, _ := tb.lookup("a"); st != api.NodeAlive {
		t.Fatalf("after a good request: %s, want alive", st)
	}
	tb.observe(member("a", api.NodeDead, 0, nil))
	if st, _, _ := tb.lookup("a"); st != api.NodeDead || !closed(down.Done()) {
		t.Fatalf("dead: %s, down closed %v", st, closed(down.Done()))
	}
	tb.suspect("a") // a dead node is not made suspect
	if st, _, _ := tb.lookup("a"); st != api.NodeDead {
		t.Fatalf("dead then suspect: %s", st)
	}
	// It comes back under the same name: accepted, with a fresh down channel.
	tb.observe(member("a", api.NodeAlive, 2, nil))
	st, down2, _ := tb.lookup("a")
	if st != api.NodeAlive || closed(down2.Done()) {
		t.Fatalf("back: %s, down closed %v", st, closed(down2.Done()))
	}
	tb.observe(member("a", api.NodeLeft, 0, nil))
	if st, _, _ := tb.lookup("a"); st != api.NodeLeft || !closed(down2.Done()) {
		t.Fatalf("left: %s", st)
	}
	// Unknown states count as dead; controllers and bad names are not nodes.
	tb.observe(member("b", "weird", 0, nil))
	if st, _, _ := tb.lookup("b"); st != api.NodeDead {
		t.Fatalf("unknown state: %s", st)
	}
	c := member("ctl", api.NodeAlive, 0, nil)
	c.Meta.Role = api.RoleController
	tb.observe(c)
	tb.observe(member("bad.name", api.NodeAlive, 0, nil))
	for _, n := range []string{"ctl", "bad.name"} {
		if _, _, ok := tb.lookup(n); ok {
			t.Fatalf("%s is in the node table", n)
		}
	}
}

func TestTableSuspectToDeadClosesDown(t *testing.T) {
	tb := newTable(downGrace)
	tb.grace = 0
	tb.observe(member("a", api.NodeAlive, 0, nil))
	_, down, _ := tb.lookup("a")
	tb.suspect("a")
	tb.observe(member("a", api.NodeDead, 0, nil))
	if !closed(down.Done()) {
		t.Fatal("suspect → dead did not cancel requests in flight")
	}
}

func TestTablePickAndSelect(t *testing.T) {
	tb := newTable(downGrace)
	tb.observe(member("a", api.NodeAlive, 3, map[string]string{"role": "web"}))
	tb.observe(member("b", api.NodeAlive, 1, map[string]string{"role": "db"}))
	tb.observe(member("c", api.NodeAlive, 1, map[string]string{"role": "web"}))
	tb.observe(member("d", api.NodeDead, 0, map[string]string{"role": "web"}))
	var got []string
	for range 5 {
		n, ok := tb.pick()
		if !ok {
			t.Fatal("no pick")
		}
		got = append(got, n)
	}
	// b and c tie at 1 (b first by name), then both at 2, then a, b, c all at 3.
	want := []string{"b", "c", "b", "c", "a"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("picks %v, want %v", got, want)
		}
	}
	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{nil, []string{"a", "b", "c"}},
		{map[string]string{"role": "web"}, []string{"a", "c"}},
		{map[string]string{"role": "db"}, []string{"b"}},
		{map[string]string{"role": "none"}, nil},
	} {
		got := tb.selectNodes(tc.labels)
		if len(got) != len(tc.want) {
			t.Fatalf("select %v: %v, want %v", tc.labels, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("select %v: %v, want %v", tc.labels, got, tc.want)
			}
		}
	}
	by, sessions := tb.counts()
	if by[api.NodeAlive] != 3 || by[api.NodeDead] != 1 || sessions != 5 {
		t.Fatalf("counts %v %d", by, sessions)
	}
	// A gossip update resets the local creation count to what the node says.
	tb.observe(member("b", api.NodeAlive, 7, nil))
	for _, n := range tb.list() {
		if n.Name == "b" && n.Sessions != 7 {
			t.Fatalf("b sessions %d, want 7", n.Sessions)
		}
	}
	empty := newTable(downGrace)
	empty.grace = 0
	empty.observe(member("x", api.NodeDead, 0, nil))
	if _, ok := empty.pick(); ok {
		t.Fatal("picked a dead node")
	}
}

func TestTableSinceAndList(t *testing.T) {
	tb := newTable(downGrace)
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	tb.now = func() time.Time { return now }
	tb.observe(member("z", api.NodeAlive, 0, nil))
	tb.observe(member("a", api.NodeAlive, 0, map[string]string{"k": "v"}))
	l := tb.list()
	if len(l) != 2 || l[0].Name != "a" || l[1].Name != "z" || l[0].Since != "2026-11-22T03:00:00Z" || l[0].Labels["k"] != "v" {
		t.Fatalf("list %+v", l)
	}
	l[0].Labels["k"] = "changed"
	if tb.list()[0].Labels["k"] != "v" {
		t.Fatal("list shares the table's label map")
	}
}

// TestTableGrace: a dead or left notice takes effect after the grace, unless the
// node is reported alive again before.
func TestTableGrace(t *testing.T) {
	tb := newTable(downGrace)
	tb.grace = 50 * time.Millisecond
	defer tb.close()
	tb.observe(member("a", api.NodeAlive, 0, nil))
	_, down, _ := tb.lookup("a")
	tb.observe(member("a", api.NodeLeft, 0, nil))
	if st, _, _ := tb.lookup("a"); st != api.NodeSuspect || closed(down.Done()) {
		t.Fatalf("in the grace: %s, down closed %v", st, closed(down.Done()))
	}
	tb.observe(member("a", api.NodeAlive, 0, nil)) // a stale notice: it is back
	// Nothing may happen when the grace would have ended: watch for 4 graces.
	<-time.After(4 * tb.grace)
	if st, _, _ := tb.lookup("a"); st != api.NodeAlive || closed(down.Done()) {
		t.Fatalf("after a stale notice: %s, down closed %v", st, closed(down.Done()))
	}
	tb.observe(member("a", api.NodeDead, 0, nil))
	testWait(t, func() bool { st, _, _ := tb.lookup("a"); return st == api.NodeDead && closed(down.Done()) })
	// A node never seen alive is believed at once.
	tb.observe(member("b", api.NodeDead, 0, nil))
	if st, _, _ := tb.lookup("b"); st != api.NodeDead {
		t.Fatalf("new dead node: %s", st)
	}
}

func testWait(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
