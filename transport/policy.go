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

// policyResync is how often a reader gets the policy again without being told of
// a change (a message it missed while the connection was down).
const policyResync = 5 * time.Second

// policyPokeWait bounds the last wait of a reader that was told of a change and
// does not see it yet (about twice that in all).
const policyPokeWait = 640 * time.Millisecond

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

// WithReplicas sets the copies the policy bucket keeps (see KV.WithReplicas).
func (p *Policy) WithReplicas(n int) *Policy {
	p.kv.WithReplicas(n)
	return p
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
		return nil, 0, fmt.Errorf("transport: policy: get: %w", unavailable(err))
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
		return 0, fmt.Errorf("transport: policy: put: %w", unavailable(err))
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
//
// A reader (a node) makes no JetStream consumer (its permissions allow none): it
// subscribes to the key's subject, and gets the key again on every message there
// and every policyResync (watchByGet).
func (p *Policy) Watch(ctx context.Context, fn func(doc []byte, revision uint64)) (stop func(), err error) {
	if p.kv.readOnly {
		return p.watchByGet(ctx, fn)
	}
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

// watchByGet is Watch for a reader: a core subscription on $KV.<bucket>.<key>
// tells of a change (a put, a delete), and the key is got again (a direct get),
// then and every policyResync (what was missed while disconnected). fn is called
// when the revision changes, and once at the start, before watchByGet returns.
func (p *Policy) watchByGet(ctx context.Context, fn func(doc []byte, revision uint64)) (stop func(), err error) {
	poke := make(chan struct{}, 1)
	signal := func() {
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	sub, err := p.kv.nc.Subscribe("$KV."+api.BucketPolicy+"."+PolicyKey, func(*nats.Msg) { signal() })
	if err != nil {
		return nil, fmt.Errorf("transport: policy: watch: %w", err)
	}
	var last struct {
		seen bool
		rev  uint64
	}
	// look gets the key and tells fn when its revision changed; it reports whether
	// it did.
	look := func(ctx context.Context) bool {
		doc, rev, err := p.latest(ctx)
		if err != nil {
			if ctx.Err() == nil {
				p.kv.log.Warn("policy not readable: trying again", "bucket", api.BucketPolicy, "err", err)
			}
			return false
		}
		if last.seen && rev == last.rev {
			return false
		}
		last.seen, last.rev = true, rev
		fn(doc, rev)
		return true
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	look(gctx)
	cancel()
	if !last.seen {
		fn(nil, 0) // not readable yet: no policy until it is
		last.seen = true
	}
	wctx, wcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // owned by this watch: ends with stop
		defer close(done)
		t := time.NewTicker(policyResync)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-poke:
				// The change reaches this subscription and the stream at once, and
				// the stream may not have stored it yet when the get arrives: look
				// again a few times, a little later each, until it shows.
				gctx, cancel := context.WithTimeout(wctx, 5*time.Second)
				for wait := 10 * time.Millisecond; !look(gctx) && wait <= policyPokeWait && gctx.Err() == nil; wait *= 2 {
					pause := time.NewTimer(wait)
					select {
					case <-gctx.Done():
					case <-pause.C:
					}
					pause.Stop()
				}
				cancel()
				continue
			case <-t.C:
			}
			gctx, cancel := context.WithTimeout(wctx, 5*time.Second)
			look(gctx)
			cancel()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = sub.Unsubscribe()
			wcancel()
			<-done
		})
	}, nil
}

// latest is the key's last message in the bucket's stream: its value and revision,
// or nil and the revision of its deletion (nil and 0: never set, or no bucket).
func (p *Policy) latest(ctx context.Context) (doc []byte, revision uint64, err error) {
	js, err := jetstream.New(p.kv.nc)
	if err != nil {
		return nil, 0, fmt.Errorf("transport: policy: %w", err)
	}
	st, err := js.Stream(ctx, "KV_"+api.BucketPolicy)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("transport: policy: %w", err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "$KV."+api.BucketPolicy+"."+PolicyKey)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("transport: policy: get: %w", unavailable(err))
	}
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return nil, m.Sequence, nil
	}
	if m.Data == nil {
		return []byte{}, m.Sequence, nil
	}
	return m.Data, m.Sequence, nil
}
