package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
)

// fakeBus is controller.Bus in memory: each subject's responder is a function the
// test scripts, so routing and failure paths (no responders, a node that goes down
// or hangs mid-call, malformed replies, cancellation) are tested in milliseconds
// without NATS, node agents or shells. The real-NATS fixture (fixture_test.go)
// tests the same routes against real nodes.
type fakeBus struct {
	mu       sync.Mutex // guards the fields below
	serve    map[string]responder
	subs     map[int]fakeSub
	nextSub  int
	requests []fakeMsg // every request, in order
	pubs     []fakeMsg // every publication, in order
	down     bool      // Connected reports false

	inflight sync.WaitGroup // responders running: a test may wait for them
}

// responder answers one request. ctx is the request's context as the controller
// passed it to the bus: it ends when the controller gives up on the request.
type responder func(ctx context.Context, header map[string]string, data []byte) ([]byte, error)

type fakeSub struct {
	subject string // may hold * and > wildcards
	fn      func(subject string, header map[string]string, data []byte)
}

type fakeMsg struct {
	subject string
	header  map[string]string
	data    []byte
}

var _ controller.Bus = (*fakeBus)(nil)

func newFakeBus() *fakeBus {
	return &fakeBus{serve: map[string]responder{}, subs: map[int]fakeSub{}}
}

// handle makes fn the responder of node's verb (nil: nobody serves it).
func (b *fakeBus) handle(node, verb string, fn responder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	subject := api.Subjects{}.RPC(node, verb)
	if fn == nil {
		delete(b.serve, subject)
		return
	}
	b.serve[subject] = fn
}

func (b *fakeBus) Request(ctx context.Context, subject string, header map[string]string, data []byte) ([]byte, error) {
	b.mu.Lock()
	b.requests = append(b.requests, fakeMsg{subject, cloneHeader(header), append([]byte(nil), data...)})
	fn := b.serve[subject]
	if fn != nil {
		b.inflight.Add(1)
	}
	b.mu.Unlock()
	if fn == nil {
		return nil, fmt.Errorf("fake bus: %s: %w", subject, api.ErrNoResponders)
	}
	defer b.inflight.Done()
	return fn(ctx, header, data)
}

func (b *fakeBus) Subscribe(subject string, fn func(subject string, header map[string]string, data []byte)) (func() error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.nextSub
	b.nextSub++
	b.subs[id] = fakeSub{subject, fn}
	return func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.subs, id)
		return nil
	}, nil
}

// Publish records the message and delivers it to the matching subscribers on the
// caller's goroutine.
func (b *fakeBus) Publish(subject string, header map[string]string, data []byte) error {
	b.mu.Lock()
	b.pubs = append(b.pubs, fakeMsg{subject, cloneHeader(header), append([]byte(nil), data...)})
	var fns []func(string, map[string]string, []byte)
	for _, s := range b.subs {
		if subjectMatch(s.subject, subject) {
			fns = append(fns, s.fn)
		}
	}
	b.mu.Unlock()
	for _, fn := range fns {
		fn(subject, header, data)
	}
	return nil
}

func (b *fakeBus) Connected() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.down
}

// sent returns the requests sent to subject so far.
func (b *fakeBus) sent(subject string) []fakeMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []fakeMsg
	for _, m := range b.requests {
		if m.subject == subject {
			out = append(out, m)
		}
	}
	return out
}

// published returns the messages published on subjects matching pattern so far.
func (b *fakeBus) published(pattern string) []fakeMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []fakeMsg
	for _, m := range b.pubs {
		if subjectMatch(pattern, m.subject) {
			out = append(out, m)
		}
	}
	return out
}

func cloneHeader(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	return out
}

// subjectMatch reports whether subject matches pattern (NATS wildcards: * one
// token, > the rest).
func subjectMatch(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}

// reply is a responder that answers v as JSON.
func reply(v any) responder {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return func(context.Context, map[string]string, []byte) ([]byte, error) { return b, nil }
}

// fail is a responder that answers with the node error e, as transport.Conn's
// Request returns a service error reply.
func fail(e *api.Error) responder {
	return func(context.Context, map[string]string, []byte) ([]byte, error) { return nil, e }
}

// hang is a responder that answers only when the controller gives up: it reports
// the request's end on ended, and how long after the call it came.
type hang struct {
	started chan struct{} // closed when the request reached the bus
	ended   chan error    // the request context's error, once it ends
	once    sync.Once
}

func newHang() *hang { return &hang{started: make(chan struct{}), ended: make(chan error, 1)} }

func (h *hang) respond(ctx context.Context, _ map[string]string, _ []byte) ([]byte, error) {
	h.once.Do(func() { close(h.started) })
	<-ctx.Done()
	h.ended <- ctx.Err()
	return nil, ctx.Err()
}

// waitStarted waits until the request reached the bus.
func (h *hang) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-h.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the bus")
	}
}

// waitEnded waits until the controller cancelled the request on the bus.
func (h *hang) waitEnded(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-h.ended:
	case <-time.After(within):
		t.Fatalf("the request's context on the bus was not cancelled within %v", within)
	}
}
