package gossip_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport/gossip"
)

var key1 = bytes.Repeat([]byte{1}, 32)

// changes records OnChange calls.
type changes struct {
	mu  sync.Mutex
	got []gossip.Member
}

func (c *changes) add(m gossip.Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, m)
}

func (c *changes) saw(name, state string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.got {
		if m.Name == name && m.State == state {
			return true
		}
	}
	return false
}

func startGossip(t *testing.T, cfg gossip.Config) *gossip.Gossip {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testutil.Logger()
	}
	if cfg.SecretKey == nil {
		cfg.SecretKey = key1
	}
	if cfg.Meta.Name == "" {
		cfg.Meta = api.NodeMeta{Name: cfg.Name, Version: "0.1.0", Proto: 1, Labels: map[string]string{"role": cfg.Name}}
	}
	g, err := gossip.Start(testutil.Context(t, 10*time.Second), cfg)
	if err != nil {
		if g != nil {
			g.Close()
		}
		t.Fatalf("start gossip %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close %s: %v", cfg.Name, err)
		}
	})
	return g
}

// state returns the state and meta of name as g sees it.
func state(g *gossip.Gossip, name string) (gossip.Member, bool) {
	for _, m := range g.Members() {
		if m.Name == name {
			return m, true
		}
	}
	return gossip.Member{}, false
}

func TestGossipCluster(t *testing.T) {
	var ch changes
	g1 := startGossip(t, gossip.Config{Name: "g1", SecretKey: key1, OnChange: ch.add})
	g2 := startGossip(t, gossip.Config{Name: "g2", SecretKey: key1, Join: []string{g1.Addr()}})
	g3 := startGossip(t, gossip.Config{Name: "g3", SecretKey: key1, Join: []string{g2.Addr()}})
	all := []*gossip.Gossip{g1, g2, g3}

	for _, g := range all {
		testutil.Eventually(t, 10*time.Second, func() bool {
			for _, other := range all {
				m, ok := state(g, other.Name())
				if !ok || m.State != gossip.MemberAlive || m.Meta.Name != other.Name() || m.Meta.Labels["role"] != other.Name() || m.Addr != other.Addr() {
					return false
				}
			}
			return true
		}, "%s sees all three alive with their meta: %+v", g.Name(), g.Members())
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return ch.saw("g2", gossip.MemberAlive) && ch.saw("g3", gossip.MemberAlive) }, "OnChange reports joins")

	// Metadata updates propagate.
	if err := g2.UpdateMeta(api.NodeMeta{Name: "g2", Version: "0.1.0", Sessions: 7, Labels: map[string]string{"role": "g2"}}); err != nil {
		t.Fatal(err)
	}
	if m, _ := state(g2, "g2"); m.Meta.Sessions != 7 {
		t.Fatalf("local member meta not updated at once: %+v", m)
	}
	for _, g := range []*gossip.Gossip{g1, g3} {
		testutil.Eventually(t, 10*time.Second, func() bool {
			m, _ := state(g, "g2")
			return m.Meta.Sessions == 7
		}, "%s sees g2's new meta", g.Name())
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		for _, m := range ch.got {
			if m.Name == "g2" && m.Meta.Sessions == 7 {
				return true
			}
		}
		return false
	}, "OnChange reports the meta update")

	// A member that closes is seen as left.
	if err := g3.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g3.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for _, g := range []*gossip.Gossip{g1, g2} {
		testutil.Eventually(t, 10*time.Second, func() bool {
			m, ok := state(g, "g3")
			return ok && m.State == gossip.MemberLeft && m.Meta.Name == "g3"
		}, "%s sees g3 left, with its last meta: %+v", g.Name(), g.Members())
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return ch.saw("g3", gossip.MemberLeft) }, "OnChange reports g3 left")
	if _, err := g3.Join(testutil.Context(t, time.Second), []string{g1.Addr()}); !errors.Is(err, gossip.ErrClosed) {
		t.Fatalf("join after close: %v", err)
	}
}

func TestGossipWrongKeyCannotJoin(t *testing.T) {
	g1 := startGossip(t, gossip.Config{Name: "k1", SecretKey: key1})
	// A member without a key does not start (TestGossipConfigErrors); one with
	// another key starts but cannot join.
	for name, key := range map[string][]byte{"other-key": bytes.Repeat([]byte{2}, 32), "short-key": bytes.Repeat([]byte{2}, 16)} {
		g, err := gossip.Start(testutil.Context(t, 10*time.Second), gossip.Config{Name: name, SecretKey: key, Join: []string{g1.Addr()}, Logger: testutil.Logger()})
		if g == nil {
			t.Fatalf("%s: no gossip returned: %v", name, err)
		}
		if !errors.Is(err, gossip.ErrJoin) {
			t.Errorf("%s joined: %v", name, err)
		}
		if n := len(g.Members()); n != 1 {
			t.Errorf("%s sees %d members", name, n)
		}
		if err := g.Close(); err != nil {
			t.Error(err)
		}
		if _, ok := state(g1, name); ok {
			t.Errorf("k1 lists %s", name)
		}
	}
}

func TestGossipMetaTooLarge(t *testing.T) {
	big := api.NodeMeta{Name: "m1", Labels: map[string]string{"x": strings.Repeat("y", gossip.MaxMetaSize)}}
	if _, err := gossip.Start(testutil.Context(t, 5*time.Second), gossip.Config{Name: "m1", Meta: big, SecretKey: key1, Logger: testutil.Logger()}); !errors.Is(err, gossip.ErrMetaTooLarge) {
		t.Fatalf("start with big meta: %v", err)
	}
	g := startGossip(t, gossip.Config{Name: "m1"})
	if err := g.UpdateMeta(big); !errors.Is(err, gossip.ErrMetaTooLarge) {
		t.Fatalf("update with big meta: %v", err)
	}
	if m, _ := state(g, "m1"); m.Meta.Labels["x"] != "" {
		t.Fatal("a rejected update changed the meta")
	}
	// Just under the limit is fine.
	labels := map[string]string{}
	for i := 0; ; i++ {
		labels[fmt.Sprintf("k%02d", i)] = "vvvvvvvvvv"
		if err := g.UpdateMeta(api.NodeMeta{Name: "m1", Labels: labels}); err != nil {
			if !errors.Is(err, gossip.ErrMetaTooLarge) || i < 10 {
				t.Fatalf("after %d labels: %v", i, err)
			}
			break
		}
	}
}

func TestGossipConfigErrors(t *testing.T) {
	for name, cfg := range map[string]gossip.Config{
		"non-loopback without key": {Name: "c1", BindAddr: "0.0.0.0"},
		"loopback without key":     {Name: "c1"},
		"bad key length":           {Name: "c1", SecretKey: []byte("short")},
		"bad name":                 {Name: "a.b"},
		"no name":                  {},
		"bind is not an ip":        {Name: "c1", BindAddr: "localhost"},
	} {
		cfg.Logger = testutil.Logger()
		g, err := gossip.Start(testutil.Context(t, 5*time.Second), cfg)
		if g != nil {
			g.Close()
		}
		if !errors.Is(err, gossip.ErrConfig) && !errors.Is(err, gossip.ErrInsecure) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, bind := range []string{"0.0.0.0", "127.0.0.1", ""} {
		if _, err := gossip.Start(testutil.Context(t, 5*time.Second), gossip.Config{Name: "c1", BindAddr: bind, Logger: testutil.Logger()}); !errors.Is(err, gossip.ErrInsecure) {
			t.Errorf("bind %q without key: %v", bind, err)
		}
	}
}

func TestGossipJoinFailureKeepsRunning(t *testing.T) {
	g, err := gossip.Start(testutil.Context(t, 10*time.Second), gossip.Config{Name: "j1", Join: []string{testutil.FreeAddr(t)}, SecretKey: key1, Logger: testutil.Logger()})
	if !errors.Is(err, gossip.ErrJoin) || g == nil {
		t.Fatalf("join of a dead seed: %v (gossip %v)", err, g)
	}
	defer g.Close()
	// It still works: a later member joins it.
	g2 := startGossip(t, gossip.Config{Name: "j2", Join: []string{g.Addr()}})
	testutil.Eventually(t, 10*time.Second, func() bool { m, ok := state(g, "j2"); return ok && m.State == gossip.MemberAlive }, "j1 sees j2")
	_ = g2
}

func TestGossipCrashedMemberIsDead(t *testing.T) {
	var ch changes
	g1 := startGossip(t, gossip.Config{Name: "d1", OnChange: ch.add})
	g2 := startGossip(t, gossip.Config{Name: "d2", Join: []string{g1.Addr()}})
	testutil.Eventually(t, 10*time.Second, func() bool { m, ok := state(g1, "d2"); return ok && m.State == gossip.MemberAlive }, "d1 sees d2")
	gossip.Crash(g2)
	testutil.Eventually(t, 20*time.Second, func() bool { m, _ := state(g1, "d2"); return m.State == gossip.MemberDead }, "d1 sees d2 dead: %+v", g1.Members())
	if m, _ := state(g1, "d2"); m.Meta.Name != "d2" {
		t.Errorf("a dead member keeps its last meta: %+v", m)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return ch.saw("d2", gossip.MemberDead) }, "OnChange reports d2 dead")
}
