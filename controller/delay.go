package controller

import (
	"sync"
	"time"
)

// The controller publishes an audit record for every mutating request. Published at once,
// a record reaches the NATS server together with the reply, and the server stores
// it in its JetStream stream before it delivers the reply: on a machine with few
// cores the record's storage came before the requester's answer. A delayQueue holds
// such messages for at most its delay and sends those of that span together, in
// order. (The node has the same type: DESIGN.md's layout lets the two share
// no package but api and replay.)

// delayQueue sends messages through its send function at most Delay after they were
// added, in the order they were added. Its methods are safe for concurrent use.
type delayQueue[T any] struct {
	delay time.Duration
	send  func(T)

	sendMu sync.Mutex // held while sending, so batches go out in order

	mu     sync.Mutex // guards the fields below
	held   []T
	timer  *time.Timer // armed while held is not empty
	closed bool
}

// newDelayQueue returns a queue that sends through send, which must not block for long; it
// runs on a timer goroutine (or in Close).
func newDelayQueue[T any](delay time.Duration, send func(T)) *delayQueue[T] {
	return &delayQueue[T]{delay: delay, send: send}
}

// Add queues m. After Close, m is sent at once.
func (q *delayQueue[T]) Add(m T) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.sendMu.Lock()
		q.send(m)
		q.sendMu.Unlock()
		return
	}
	q.held = append(q.held, m)
	if len(q.held) == 1 {
		if q.timer == nil {
			q.timer = time.AfterFunc(q.delay, q.Flush)
		} else {
			q.timer.Reset(q.delay)
		}
	}
	q.mu.Unlock()
}

// Flush sends what is queued now.
func (q *delayQueue[T]) Flush() {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.mu.Lock()
	held := q.held
	q.held = nil
	q.mu.Unlock()
	for _, m := range held {
		q.send(m)
	}
}

// Close sends what is queued and makes later Adds send at once. It waits for a
// flush under way; it is idempotent.
func (q *delayQueue[T]) Close() {
	q.mu.Lock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.mu.Unlock()
	q.Flush()
}
