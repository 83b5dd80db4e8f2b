package node

import (
	"context"

	"github.com/fleetmux/fleetmux/api"
)

// Bus is what the node needs of its message bus (NATS in production; cmd wires
// transport.Conn in). Implementations are safe for concurrent use.
type Bus interface {
	// Publish sends one message without waiting on the network: while disconnected it
	// buffers or fails fast. The node never retries: a subscriber that sees a gap in
	// the output offsets fills it with the read verb.
	Publish(subject string, header map[string]string, data []byte) error
	// Serve answers requests as the micro service name/version, one endpoint per verb
	// (verb → subject), until stop is called. handle runs on its own goroutine per
	// request, with the subject the request was published to; its ctx is cancelled
	// by stop, which waits for running handlers. handle's reply is the value, or
	// the error sent as a service error (NATS micro's error headers).
	Serve(name, version string, subjects map[string]string, handle func(ctx context.Context, verb, subject string, header map[string]string, data []byte) ([]byte, *api.Error)) (stop func() error, err error)
	// Connected reports whether the bus is connected now.
	Connected() bool
}

// Gossip is what the node needs of cluster membership: a way to tell the cluster
// about itself. UpdateMeta never blocks.
type Gossip interface {
	UpdateMeta(meta api.NodeMeta) error
}
