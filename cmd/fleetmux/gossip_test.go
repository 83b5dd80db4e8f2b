package main

import (
	"encoding/json"
	"io"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport/gossip"
)

// fakeNode is a plain memberlist member that gossips a node's metadata: what
// another local user can start without fleetmux.
type fakeNode struct{ meta []byte }

func (f fakeNode) NodeMeta(int) []byte           { return f.meta }
func (fakeNode) NotifyMsg([]byte)                {}
func (fakeNode) GetBroadcasts(int, int) [][]byte { return nil }
func (fakeNode) LocalState(bool) []byte          { return nil }
func (fakeNode) MergeRemoteState([]byte, bool)   {}

func startFakeNode(t *testing.T, name string, key []byte) *memberlist.Memberlist {
	t.Helper()
	meta, _ := json.Marshal(api.NodeMeta{Name: name, Version: "0.1.0", Proto: api.ProtocolVersion})
	cfg := memberlist.DefaultLocalConfig()
	cfg.Name, cfg.BindAddr, cfg.BindPort, cfg.AdvertisePort = name, "127.0.0.1", 0, 0
	cfg.Delegate = fakeNode{meta: meta}
	cfg.SecretKey = key
	cfg.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ml.Shutdown() })
	return ml
}

// TestDevGossipNeedsKey is issue 15 #13: dev's gossip had no key, so another
// local user joined a fake node that the controller then picked for new
// sessions. Now dev keeps a key (DATA/keys/gossip.key, 0600): a member without it
// cannot join and never shows in /v1/nodes, while one with it does.
func TestDevGossipNeedsKey(t *testing.T) {
	gossipAddr := freeAddrs(t, 1)[0]
	addr := startDev(t, "--gossip-listen", gossipAddr)
	nodes := func() map[string]bool {
		out, errs, err := runArgs(t, "nodes", "--addr", addr, "--json")
		if err != nil {
			t.Fatalf("nodes: %v %s", err, errs)
		}
		var l api.NodeList
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("nodes: %q: %v", out, err)
		}
		m := map[string]bool{}
		for _, n := range l.Nodes {
			m[n.Name] = true
		}
		return m
	}
	evil := startFakeNode(t, "evil", nil)
	if n, err := evil.Join([]string{gossipAddr}); err == nil || n != 0 {
		t.Errorf("a member without the key joined dev's gossip (%d, %v)", n, err)
	}
	st, err := os.Stat(filepath.Join("data", "keys", "gossip.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("dev's gossip key: %v %v", st, err)
	}
	key, err := gossip.ReadKey(filepath.Join("data", "keys", "gossip.key"))
	if err != nil {
		t.Fatal(err)
	}
	// A member with the key joins and is listed: the controller is watching.
	good := startFakeNode(t, "good", key)
	if _, err := good.Join([]string{gossipAddr}); err != nil {
		t.Fatalf("a member with the key: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return nodes()["good"] }, "the keyed member in /v1/nodes")
	if got := nodes(); got["evil"] || !got["here"] {
		t.Errorf("nodes: %v, want here and good, never evil", got)
	}
	if evil.NumMembers() != 1 {
		t.Errorf("the keyless member sees %d members", evil.NumMembers())
	}
}
