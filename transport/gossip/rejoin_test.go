package gossip_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport/gossip"
)

func TestMissingSeeds(t *testing.T) {
	alive := func(addr string) gossip.Member {
		return gossip.Member{Name: addr, Addr: addr, State: gossip.MemberAlive}
	}
	in := func(addr, state string) gossip.Member {
		return gossip.Member{Name: addr, Addr: addr, State: state}
	}
	tests := []struct {
		name    string
		members []gossip.Member
		seeds   []string
		want    []string
	}{
		{"no seeds", []gossip.Member{alive("10.0.0.1:7946")}, nil, nil},
		{"alone", nil, []string{"10.0.0.1:7946", "10.0.0.2:7946"}, []string{"10.0.0.1:7946", "10.0.0.2:7946"}},
		{"all alive", []gossip.Member{alive("10.0.0.1:7946"), alive("10.0.0.2:7946")}, []string{"10.0.0.2:7946", "10.0.0.1:7946"}, nil},
		{"one alive", []gossip.Member{alive("10.0.0.1:7946")}, []string{"10.0.0.1:7946", "10.0.0.2:7946"}, []string{"10.0.0.2:7946"}},
		{"dead seed", []gossip.Member{in("10.0.0.1:7946", gossip.MemberDead)}, []string{"10.0.0.1:7946"}, []string{"10.0.0.1:7946"}},
		{"left seed", []gossip.Member{in("10.0.0.1:7946", gossip.MemberLeft)}, []string{"10.0.0.1:7946"}, []string{"10.0.0.1:7946"}},
		{"suspect seed", []gossip.Member{in("10.0.0.1:7946", gossip.MemberSuspect)}, []string{"10.0.0.1:7946"}, []string{"10.0.0.1:7946"}},
		{"other port", []gossip.Member{alive("10.0.0.1:7947")}, []string{"10.0.0.1:7946"}, []string{"10.0.0.1:7946"}},
		{"host name", []gossip.Member{alive("10.0.0.1:7946")}, []string{"ctrl:7946"}, []string{"ctrl:7946"}},
		{"order kept", nil, []string{"b:1", "a:1", "c:1"}, []string{"b:1", "a:1", "c:1"}},
	}
	for _, tt := range tests {
		if got := gossip.MissingSeeds(tt.members, tt.seeds); !slices.Equal(got, tt.want) {
			t.Errorf("%s: MissingSeeds = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestRejoinWarnsOncePerOutage(t *testing.T) {
	fail := errors.New("connection refused")
	tests := []struct {
		name string
		errs []error
		want []bool
	}{
		{"reached", []error{nil, nil}, []bool{false, false}},
		{"first failure", []error{fail}, []bool{true}},
		{"repeated failures", []error{fail, fail, fail}, []bool{true, false, false}},
		{"recovered then failed", []error{fail, fail, nil, fail, fail}, []bool{true, false, false, true, false}},
		{"failure after success", []error{nil, fail}, []bool{false, true}},
	}
	for _, tt := range tests {
		if got := gossip.RejoinWarnings(tt.errs); !slices.Equal(got, tt.want) {
			t.Errorf("%s: warnings = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestKeepJoinedJoinsALateSeed: the seed is not up when KeepJoined starts (a
// controller restarting); once it listens, the member joins it without anyone joining
// anyone by hand.
func TestKeepJoinedJoinsALateSeed(t *testing.T) {
	seed := testutil.FreeAddr(t)
	g := startGossip(t, gossip.Config{Name: "late2"})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); g.KeepJoined(ctx, []string{seed}, 50*time.Millisecond) }()
	defer func() { cancel(); wg.Wait() }()

	_, ps, _ := net.SplitHostPort(seed)
	port, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	s := startGossip(t, gossip.Config{Name: "late1", BindPort: port})
	if s.Addr() != seed {
		t.Fatalf("seed listens on %s, want %s", s.Addr(), seed)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { m, ok := state(s, "late2"); return ok && m.State == gossip.MemberAlive }, "the late seed sees the member")

	// The seed restarts on the same address: it is joined again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { m, _ := state(g, "late1"); return m.State == gossip.MemberLeft }, "the member sees the seed leave")
	s2 := startGossip(t, gossip.Config{Name: "late1", BindPort: port})
	testutil.Eventually(t, 10*time.Second, func() bool { m, ok := state(s2, "late2"); return ok && m.State == gossip.MemberAlive }, "the restarted seed sees the member")
}
