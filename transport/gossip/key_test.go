package gossip_test

import (
	"encoding/json"
	"errors"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport/gossip"
)

// fakeMeta is a raw memberlist member posing as a node agent.
type fakeMeta struct{ meta []byte }

func (f fakeMeta) NodeMeta(int) []byte           { return f.meta }
func (fakeMeta) NotifyMsg([]byte)                {}
func (fakeMeta) GetBroadcasts(int, int) [][]byte { return nil }
func (fakeMeta) LocalState(bool) []byte          { return nil }
func (fakeMeta) MergeRemoteState([]byte, bool)   {}

// TestGossipKeylessMemberCannotJoin is issue 15 #13 at the memberlist level: a
// plain memberlist member (no key, as another local user would start one) cannot
// join a fleetmux member on loopback, and is never listed.
func TestGossipKeylessMemberCannotJoin(t *testing.T) {
	g := startGossip(t, gossip.Config{Name: "real"})
	meta, _ := json.Marshal(api.NodeMeta{Name: "evil", Version: "0.1.0", Proto: 1})
	cfg := memberlist.DefaultLocalConfig()
	cfg.Name, cfg.BindAddr, cfg.BindPort, cfg.AdvertisePort = "evil", "127.0.0.1", 0, 0
	cfg.Delegate = fakeMeta{meta: meta}
	cfg.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	if n, err := ml.Join([]string{g.Addr()}); err == nil || n != 0 {
		t.Errorf("a keyless member joined (%d, %v)", n, err)
	}
	if ml.NumMembers() != 1 {
		t.Errorf("the keyless member sees %d members", ml.NumMembers())
	}
	// The real member, with another keyed member joining meanwhile, never lists it.
	other := startGossip(t, gossip.Config{Name: "other", Join: []string{g.Addr()}})
	testutil.Eventually(t, 10*time.Second, func() bool { m, ok := state(g, "other"); return ok && m.State == gossip.MemberAlive }, "real sees other")
	if _, ok := state(g, "evil"); ok {
		t.Errorf("the real member lists the keyless one: %+v", g.Members())
	}
	_ = other
}

func TestGossipKeyFile(t *testing.T) {
	data := t.TempDir()
	k1, err := gossip.EnsureKey(data)
	if err != nil || len(k1) != 32 {
		t.Fatalf("ensure: %x %v", k1, err)
	}
	path := gossip.KeyPath(data)
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	k2, err := gossip.EnsureKey(data) // kept, not remade
	if err != nil || string(k1) != string(k2) {
		t.Fatalf("second ensure: %v", err)
	}
	os.Chmod(path, 0o644)
	if _, err := gossip.ReadKey(path); !errors.Is(err, datadir.ErrUnsafe) {
		t.Errorf("a key others can read: %v", err)
	}
	if _, err := gossip.ReadKey(filepath.Join(data, "none")); !errors.Is(err, gossip.ErrNoKey) {
		t.Errorf("missing: %v", err)
	}
	for _, bad := range []string{"zz", "abcd", strings.Repeat("ab", 33)} {
		if _, err := gossip.ParseKey(bad); !errors.Is(err, gossip.ErrConfig) {
			t.Errorf("ParseKey(%q): %v", bad, err)
		}
	}
}
