// Package delay holds Sleep, a wait a context cuts short, and Queue, which sends messages a short, bounded time after they
// were added, in order, in batches. The node and the controller use it for their
// audit records: published at once, a record reaches the NATS server together with
// the reply, and the server stores it in its JetStream stream before it delivers the
// reply, so on a machine with few cores the record's storage came before the
// requester's answer. Held for at most the delay, the records of that span go out
// together after the reply.
package delay

import (
	"context"
	"sync"
	"time"
)

// Queue sends messages through its send function at most its delay after they were
// added, in the order they were added. Its methods are safe for concurrent use.
type Queue[T any] struct {
	delay time.Duration
	send  func(T)

	sendMu sync.Mutex // held while sending, so batches go out in order

	mu     sync.Mutex // guards the fields below
	held   []T
	timer  *time.Timer // armed while held is not empty
	closed bool
}

// New returns a queue that sends through send, which must not block for long; it
// runs on a timer goroutine (or in Flush or Close). Close stops the timer.
func New[T any](delay time.Duration, send func(T)) *Queue[T] {
	return &Queue[T]{delay: delay, send: send}
}

// Add queues m. After Close, m is sent at once.
func (q *Queue[T]) Add(m T) {
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
func (q *Queue[T]) Flush() {
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
func (q *Queue[T]) Close() {
	q.mu.Lock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.mu.Unlock()
	q.Flush()
}

// Sleep waits d or until ctx is done; it returns ctx's error in the second case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
