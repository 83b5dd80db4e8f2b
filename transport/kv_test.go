package transport_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/transport"
	"github.com/fleetmux/fleetmux/transport/natsauth"
)

// kvSeen is what a watch has delivered: key → value (absent: deleted).
type kvSeen struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *kvSeen) fn(key string, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if value == nil {
		delete(s.m, key)
		return
	}
	s.m[key] = string(value)
}

func (s *kvSeen) get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return v, ok
}

// TestKVTwoControllers: two controllers, each with its own NATS identity, share
// the tokens bucket: one creates and deletes, the other's watch sees both.
func TestKVTwoControllers(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	ctx := testutil.Context(t, 20*time.Second)
	c1, log1 := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "c1"})
	c2, log2 := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "c2"})
	kv1, err := transport.OpenKV(ctx, c1.NC(), api.BucketTokens, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	if err := kv1.Create(ctx, "before", []byte("v0")); err != nil {
		t.Fatal(err)
	}
	kv2, err := transport.OpenKV(ctx, c2.NC(), api.BucketTokens, testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	seen := &kvSeen{m: map[string]string{}}
	stop, err := kv2.Watch(ctx, seen.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if v, ok := seen.get("before"); !ok || v != "v0" {
		t.Fatalf("Watch returned before delivering the values held: %q %v", v, ok)
	}
	if err := kv1.Create(ctx, "ops", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := kv2.Create(ctx, "ops", []byte("v2")); !errors.Is(err, api.ErrKeyExists) {
		t.Fatalf("second create = %v, want api.ErrKeyExists", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { v, ok := seen.get("ops"); return ok && v == "v1" }, "the watch to see ops")
	if err := kv1.Delete(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { _, ok := seen.get("ops"); return !ok }, "the watch to see ops deleted")
	if err := kv2.Create(ctx, "ops", []byte("v3")); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { v, _ := seen.get("ops"); return v == "v3" }, "the watch to see ops again")
	stop()
	for _, l := range []*testutil.Buffer{log1, log2} {
		if s := l.String(); strings.Contains(strings.ToLower(s), "permissions violation") {
			t.Fatalf("permission violations: %s", s)
		}
	}
}

// TestKVNodeCannotWriteTokens: a node's identity cannot touch the tokens bucket.
func TestKVNodeCannotWriteTokens(t *testing.T) {
	f := testutil.StartAuthFleet(t)
	ctx := testutil.Context(t, 20*time.Second)
	c, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindController, Name: "c1"})
	if _, err := transport.OpenKV(ctx, c.NC(), api.BucketTokens, testutil.Logger()); err != nil {
		t.Fatal(err)
	}
	n, _ := f.Conn(natsauth.Identity{Kind: natsauth.KindNode, Name: "n1"})
	short := testutil.Context(t, 2*time.Second)
	if kv, err := transport.OpenKV(short, n.NC(), api.BucketTokens, testutil.Logger()); err == nil {
		if err := kv.Create(short, "evil", []byte("x")); err == nil {
			t.Fatal("a node created a token")
		}
	}
}
