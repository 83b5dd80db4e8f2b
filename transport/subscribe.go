package transport

import (
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// subPendingMsgs and subPendingBytes bound what nats.go queues for one subscription
// before it drops messages (slow consumer).
const (
	subPendingMsgs  = 65536
	subPendingBytes = 64 << 20
)

// Subscribe delivers the messages on subject (wildcards allowed) to fn until the
// returned stop is called. fn runs on the subscription's delivery goroutine, one
// message at a time, and must not block: a slow fn makes messages pile up, and past
// the pending limits they are dropped (NATS slow consumer), which output offsets
// let the subscriber detect. stop unsubscribes and returns once fn is no longer
// running and will not be called again; it is idempotent. Subscribe waits until the
// server has the subscription (or the connection is down, in which case it is sent
// on reconnect), so a message published after Subscribe returns is delivered.
func (c *Conn) Subscribe(subject string, fn func(subject string, header map[string]string, data []byte)) (stop func() error, err error) {
	if !validSubject(subject) {
		return nil, fmt.Errorf("transport: subscribe: bad subject %q", subject)
	}
	done := make(chan struct{})
	sub, err := c.nc.Subscribe(subject, func(m *nats.Msg) {
		var h map[string]string
		if len(m.Header) > 0 {
			h = make(map[string]string, len(m.Header))
			for k, v := range m.Header {
				if len(v) > 0 {
					h[k] = v[0]
				}
			}
		}
		fn(m.Subject, h, m.Data)
	})
	if err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil, fmt.Errorf("%w: subscribe %s: %w", ErrClosed, subject, err)
		}
		return nil, fmt.Errorf("transport: subscribe %s: %w", subject, err)
	}
	if err := sub.SetPendingLimits(subPendingMsgs, subPendingBytes); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("transport: subscribe %s: %w", subject, err)
	}
	sub.SetClosedHandler(func(string) { close(done) })
	if c.nc.IsConnected() {
		c.nc.Flush() // the server has the interest before we return; an error only means we are reconnecting
	}
	var (
		once    sync.Once
		stopErr error
	)
	return func() error {
		once.Do(func() {
			if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
				stopErr = fmt.Errorf("transport: unsubscribe %s: %w", subject, err)
			}
			select {
			case <-done:
			case <-c.closedCh: // the connection closed: its delivery goroutines end with it
			}
		})
		return stopErr
	}, nil
}
