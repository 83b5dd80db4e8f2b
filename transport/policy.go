package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PolicyKey is the key of the policy in force in the FLEETMUX_POLICY bucket. Its
// revision is the policy's version (every decision names it).
const PolicyKey = "current"

// policyPoll is how often a reader looks for a policy bucket that does not exist
// yet (no controller has started).
const policyPoll = 500 * time.Millisecond

// Policy is the guardrail policy kept in the FLEETMUX_POLICY bucket: controllers
// store it (NewPolicy), nodes watch it (NewPolicyReader; their NATS permissions
// only read that bucket). The document is stored as given; its revision is its
// version. Safe for concurrent use.
type Policy struct {
	kv *KV
}

// NewPolicy is the policy store of a controller: binding (on first use) creates
// the bucket when it does not exist.
func NewPolicy(nc *nats.Conn, log *slog.Logger) *Policy {
	return &Policy{kv: NewKV(nc, api.BucketPolicy, log)}
}

// NewPolicyReader is the policy of a node: it only reads, and a bucket that does
// not exist yet means no policy until one is created.
func NewPolicyReader(nc *nats.Conn, log *slog.Logger) *Policy {
	return &Policy{kv: NewKVReader(nc, api.BucketPolicy, log)}
}

// Get returns the stored document and its revision; nil and 0 when none is set.
func (p *Policy) Get(ctx context.Context) (doc []byte, revision uint64, err error) {
	kv, err := p.kv.bind(ctx)
	if errors.Is(err, ErrNoBucket) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	e, err := kv.Get(ctx, PolicyKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("transport: policy: get: %w", err)
	}
	v := e.Value()
	if v == nil {
		v = []byte{}
	}
	return v, e.Revision(), nil
}

// Put stores doc as the policy in force and returns its revision.
func (p *Policy) Put(ctx context.Context, doc []byte) (uint64, error) {
	kv, err := p.kv.bind(ctx)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Put(ctx, PolicyKey, doc)
	if err != nil {
		return 0, fmt.Errorf("transport: policy: put: %w", err)
	}
	return rev, nil
}

// Delete removes the policy (no policy: everything is allowed).
func (p *Policy) Delete(ctx context.Context) error {
	return p.kv.Delete(ctx, PolicyKey)
}

// Watch calls fn with the policy document and its revision (doc nil: none set),
// first the one held now, before Watch returns, then every change until stop. A
// reader whose bucket does not exist yet gets nil at once and the policy once a
// controller creates the bucket. fn runs on one goroutine at a time and must not
// block; after a lost connection it sees the current value again. stop waits until
// fn no longer runs. This is node.PolicySource.
func (p *Policy) Watch(ctx context.Context, fn func(doc []byte, revision uint64)) (stop func(), err error) {
	value := func(key string, v []byte, rev uint64) {
		if key == PolicyKey {
			fn(v, rev)
		}
	}
	synced := func(keys map[string]bool) {
		if !keys[PolicyKey] {
			fn(nil, 0) // the key is not set: no policy
		}
	}
	stop, err = p.kv.watchAll(ctx, value, synced)
	if err == nil || !errors.Is(err, ErrNoBucket) {
		return stop, err
	}
	// No bucket yet: no policy now; look for the bucket until it exists.
	fn(nil, 0)
	wctx, cancel := context.WithCancel(context.Background())
	var (
		mu    sync.Mutex // guards inner
		inner func()
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() { // owned by this watch: ends with stop
		defer wg.Done()
		t := time.NewTicker(policyPoll)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			s, err := p.kv.watchAll(wctx, value, synced)
			if err == nil {
				mu.Lock()
				inner = s
				mu.Unlock()
				return
			}
			if !errors.Is(err, ErrNoBucket) && wctx.Err() == nil {
				p.kv.log.Warn("policy bucket not readable: trying again", "bucket", api.BucketPolicy, "err", err)
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if inner != nil {
			inner()
		}
	}, nil
}
