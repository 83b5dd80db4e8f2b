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

// KV is a JetStream key-value bucket (DESIGN.md: FLEETMUX_TOKENS, …) shared by every
// controller: create, delete and watch keys. Safe for concurrent use.
type KV struct {
	nc       *nats.Conn
	bucket   string
	log      *slog.Logger
	readOnly bool       // binds to the bucket, never creates it (NewKVReader)
	replicas int        // copies of a bucket it creates or updates (WithReplicas)
	mu       sync.Mutex // guards kv; held while binding
	kv       jetstream.KeyValue
}

// NewKV returns the bucket on nc's JetStream without waiting for it: the first
// call binds to it (creating it when it does not exist), so a process can start
// what must listen first (gossip) while a JetStream cluster elects its leader.
func NewKV(nc *nats.Conn, bucket string, log *slog.Logger) *KV {
	return &KV{nc: nc, bucket: bucket, log: loggerOr(log)}
}

// WithReplicas sets the copies the bucket keeps in a JetStream cluster (default
// 1); an existing bucket is raised to it when bound. Call it before the first use.
func (k *KV) WithReplicas(n int) *KV {
	k.replicas = n
	return k
}

// NewKVReader is NewKV for a reader that may not create the bucket (a node reads
// FLEETMUX_POLICY, which a controller creates): binding fails with an error
// wrapping ErrNoBucket while the bucket does not exist.
func NewKVReader(nc *nats.Conn, bucket string, log *slog.Logger) *KV {
	return &KV{nc: nc, bucket: bucket, log: loggerOr(log), readOnly: true}
}

// unavailable marks err as api.ErrUnavailable when it may pass by itself (a
// JetStream that did not answer, a lost connection).
func unavailable(err error) error {
	if transientJSError(err) {
		return fmt.Errorf("%w: %w", api.ErrUnavailable, err)
	}
	return err
}

// ErrNoBucket is wrapped by the errors of a reader's KV whose bucket does not
// exist (yet).
var ErrNoBucket = errors.New("transport: kv bucket does not exist")

// OpenKV is NewKV, bound at once (see bind).
func OpenKV(ctx context.Context, nc *nats.Conn, bucket string, log *slog.Logger) (*KV, error) {
	k := NewKV(nc, bucket, log)
	if _, err := k.bind(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// bind binds to the bucket, creating it when it does not exist (file storage, one
// revision per key; a reader only binds, see NewKVReader). It retries while
// JetStream is not ready, until ctx is done.
func (k *KV) bind(ctx context.Context) (jetstream.KeyValue, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kv != nil {
		return k.kv, nil
	}
	js, err := jetstream.New(k.nc)
	if err != nil {
		return nil, fmt.Errorf("transport: jetstream: %w", err)
	}
	const attemptTimeout = 2 * time.Second
	backoff := 20 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		var kv jetstream.KeyValue
		if k.readOnly {
			kv, err = js.KeyValue(actx, k.bucket)
		} else {
			kv, err = js.CreateOrUpdateKeyValue(actx, jetstream.KeyValueConfig{
				Bucket: k.bucket, History: 1, Storage: jetstream.FileStorage, Replicas: max(k.replicas, 1),
			})
		}
		cancel()
		if err == nil {
			k.kv = kv
			return kv, nil
		}
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("transport: kv %s: %w", k.bucket, ErrNoBucket)
		}
		if !transientJSError(err) {
			return nil, fmt.Errorf("transport: kv %s: %w", k.bucket, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("transport: kv %s: %w: %w (last error: %w)", k.bucket, api.ErrUnavailable, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// Create stores value under key unless key holds a value; then the error wraps
// api.ErrKeyExists.
func (k *KV) Create(ctx context.Context, key string, value []byte) error {
	kv, err := k.bind(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Create(ctx, key, value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("transport: kv %s: %q: %w", k.bucket, key, api.ErrKeyExists)
	}
	if err != nil {
		return fmt.Errorf("transport: kv %s: create %q: %w", k.bucket, key, unavailable(err))
	}
	return nil
}

// Put stores value under key, whatever it held.
func (k *KV) Put(ctx context.Context, key string, value []byte) error {
	kv, err := k.bind(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, key, value); err != nil {
		return fmt.Errorf("transport: kv %s: put %q: %w", k.bucket, key, unavailable(err))
	}
	return nil
}

// Delete removes key and its history (watchers see it go).
func (k *KV) Delete(ctx context.Context, key string) error {
	kv, err := k.bind(ctx)
	if err != nil {
		return err
	}
	if err := kv.Purge(ctx, key); err != nil {
		return fmt.Errorf("transport: kv %s: delete %q: %w", k.bucket, key, unavailable(err))
	}
	return nil
}

// Watch calls fn with every key's value (value nil: the key was deleted), first
// the values held now, then each change as it happens. It returns once fn has seen
// every value held now (or ctx is done first, with ctx's error). fn runs on one
// goroutine, owned by the watch, and must not block. A watch the server ends (a
// lost connection) is started again, and fn sees every value again. stop ends the
// watch and waits until fn no longer runs.
func (k *KV) Watch(ctx context.Context, fn func(key string, value []byte)) (stop func(), err error) {
	return k.watchAll(ctx, func(key string, value []byte, _ uint64) { fn(key, value) }, nil)
}

// watchAll is Watch with each value's revision, and synced (when not nil) called
// on fn's goroutine each time fn has seen every value held when a watch started
// (the first time before watchAll returns), with the keys it saw then.
func (k *KV) watchAll(ctx context.Context, fn func(key string, value []byte, rev uint64), synced func(keys map[string]bool)) (stop func(), err error) {
	if _, err := k.bind(ctx); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	w, err := k.watch(ctx, wctx, fn, synced)
	if err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by the watch: ends with stop
		defer wg.Done()
		for {
			k.follow(wctx, w, fn)
			w.Stop()
			if wctx.Err() != nil {
				return
			}
			k.log.Warn("kv watch ended: watching again", "bucket", k.bucket)
			for {
				t := time.NewTimer(200 * time.Millisecond)
				select {
				case <-wctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				if w, err = k.watch(wctx, wctx, fn, synced); err == nil {
					break
				}
			}
		}
	}()
	return func() { cancel(); wg.Wait() }, nil
}

// watch starts a watcher and feeds fn the values held now (until the nil entry),
// then calls synced with their keys.
func (k *KV) watch(ctx, wctx context.Context, fn func(string, []byte, uint64), synced func(map[string]bool)) (jetstream.KeyWatcher, error) {
	keys := map[string]bool{}
	w, err := k.kv.WatchAll(wctx) // bound by Watch
	if err != nil {
		return nil, fmt.Errorf("transport: kv %s: watch: %w", k.bucket, err)
	}
	for {
		select {
		case <-ctx.Done():
			w.Stop()
			return nil, fmt.Errorf("transport: kv %s: watch: %w", k.bucket, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("transport: kv %s: watch ended", k.bucket)
			}
			if e == nil {
				if synced != nil {
					synced(keys)
				}
				return w, nil
			}
			keys[e.Key()] = true
			deliver(e, fn)
		}
	}
}

// follow feeds fn the changes of w until its updates end or ctx is done.
func (k *KV) follow(ctx context.Context, w jetstream.KeyWatcher, fn func(string, []byte, uint64)) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				deliver(e, fn)
			}
		}
	}
}

func deliver(e jetstream.KeyValueEntry, fn func(string, []byte, uint64)) {
	if e.Operation() != jetstream.KeyValuePut {
		fn(e.Key(), nil, e.Revision())
		return
	}
	v := e.Value()
	if v == nil {
		v = []byte{}
	}
	fn(e.Key(), v, e.Revision())
}
