package controller

import (
	"context"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// MaxLongPerPrincipal bounds a principal's long requests (api.LongVerb: run, wait) held
// by one node at once. A node serves a bounded number of requests at once; without
// this bound one viewer (one SSH key opening many channels of `wait --timeout
// 10m`) could take them all, and keep them after leaving. It leaves room for a
// fan-out to many sessions of one node.
const MaxLongPerPrincipal = 64

// longs counts each principal's long requests on each node (never per actor label:
// a client sets its label freely). A request whose caller left before the
// node answered still counts until its timeout: the node holds it that long.
type longs struct {
	mu sync.Mutex // guards n
	n  map[longKey]int
}

type longKey struct{ principal, node string }

func newLongs() *longs { return &longs{n: map[longKey]int{}} }

// acquire takes one of principal's slots on node for a request of the given timeout, or
// fails with api.CodeBusy. release gives it back: at once when the request ended
// with ctx alive, else when the request's timeout has passed.
func (l *longs) acquire(ctx context.Context, principal, node string, timeout time.Duration) (release func(), err error) {
	k := longKey{principal, node}
	l.mu.Lock()
	if l.n[k] >= MaxLongPerPrincipal {
		l.mu.Unlock()
		return nil, api.Errorf(api.CodeBusy, "%d long requests (run, wait) of yours are in flight on node %s, the most one principal may have: wait for one to end", MaxLongPerPrincipal, node)
	}
	l.n[k]++
	l.mu.Unlock()
	deadline := time.Now().Add(timeout)
	done := func() {
		l.mu.Lock()
		if l.n[k]--; l.n[k] <= 0 {
			delete(l.n, k)
		}
		l.mu.Unlock()
	}
	return func() {
		if ctx.Err() != nil {
			time.AfterFunc(time.Until(deadline), done) // the node still holds it
			return
		}
		done()
	}, nil
}
