package transport_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
)

// policySeen is what a policy watch has delivered, in order.
type policySeen struct {
	mu   sync.Mutex
	docs []string // "" for none
	revs []uint64
}

func (s *policySeen) fn(doc []byte, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs = append(s.docs, string(doc))
	s.revs = append(s.revs, rev)
}

func (s *policySeen) last() (string, uint64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.docs) == 0 {
		return "", 0, 0
	}
	return s.docs[len(s.docs)-1], s.revs[len(s.revs)-1], len(s.docs)
}

// TestPolicyNodeWatch: a node, with its own NATS identity (which only reads the
// policy bucket), watches the policy before any controller created the bucket, then
// sees each version a controller stores, with its revision, and the deletion.
func TestPolicyNodeWatch(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	ctx := testutil.Context(t, 30*time.Second)
	node, nodeLog := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "a"})
	reader := transport.NewPolicyReader(node.NC(), testutil.Logger())
	if doc, rev, err := reader.Get(ctx); err != nil || doc != nil || rev != 0 {
		t.Fatalf("Get before the bucket exists = %q, %d, %v; want none", doc, rev, err)
	}
	var seen policySeen
	stop, err := reader.Watch(ctx, seen.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if doc, _, n := seen.last(); n != 1 || doc != "" {
		t.Fatalf("first delivery %q (%d deliveries), want none at once", doc, n)
	}

	ctl, ctlLog := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "c"})
	store := transport.NewPolicy(ctl.NC(), testutil.Logger())
	rev1, err := store.Put(ctx, []byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { d, r, _ := seen.last(); return d == "version: 1\n" && r == rev1 }, "the node to see version %d", rev1)
	if doc, rev, err := reader.Get(ctx); err != nil || string(doc) != "version: 1\n" || rev != rev1 {
		t.Fatalf("node's Get = %q, %d, %v", doc, rev, err)
	}
	rev2, err := store.Put(ctx, []byte("version: 1\nrules: []\n"))
	if err != nil || rev2 <= rev1 {
		t.Fatalf("second put: revision %d after %d, %v", rev2, rev1, err)
	}
	// Told by the key's subject, not by the resync every policyResync (5 s).
	testutil.Eventually(t, 2*time.Second, func() bool { _, r, _ := seen.last(); return r == rev2 }, "the node to see version %d", rev2)
	if err := store.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { d, r, _ := seen.last(); return d == "" && r > rev2 }, "the node to see the deletion")

	// A watch that starts once the bucket exists, with no policy in it, gets none.
	var seen2 policySeen
	stop2, err := reader.Watch(ctx, seen2.fn)
	if err != nil {
		t.Fatal(err)
	}
	stop2()
	if doc, _, n := seen2.last(); n != 1 || doc != "" {
		t.Fatalf("watch of an empty bucket delivered %q (%d), want none once", doc, n)
	}
	if strings.Contains(strings.ToLower(nodeLog.String()), "permission") || strings.Contains(strings.ToLower(ctlLog.String()), "permission") {
		t.Fatalf("permission errors while reading the policy:\n%s\n%s", nodeLog, ctlLog)
	}
	// The node may not write the policy.
	if _, err := transport.NewPolicyReader(node.NC(), testutil.Logger()).Put(testutil.Context(t, 3*time.Second), []byte("rules: []")); err == nil {
		t.Fatal("a node stored a policy")
	}
}
