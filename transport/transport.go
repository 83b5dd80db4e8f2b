// Package transport is fleetmux's NATS plumbing: the client (Connect, *Conn:
// publishing, subscribing, the node API as a NATS micro service, requests), an
// embedded nats-server (StartServer), JetStream streams (EnsureStreams) and
// key-value buckets (KV, Policy). The fleet's NATS identities are in
// transport/natsauth, which nodes hold a connection in transport/presence, and
// gossip (memberlist) in transport/gossip.
//
// node and controller never import this package: they define small interfaces (a
// bus, a policy store) that its values satisfy, and cmd/fleetmux wires them in.
//
// Conventions: everything listens on loopback unless configured otherwise, and a
// listener beyond loopback requires authentication (the fleet's NATS authority, with
// TLS) or its constructor fails with ErrInsecure, and so does a plain-text NATS
// connection beyond loopback. Callbacks from the NATS client never block: they hand
// work to goroutines owned by the value that registered them, and Close/Shutdown
// waits for those goroutines.
package transport

import (
	"errors"
	"log/slog"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInsecure: a listener beyond loopback was configured without authentication.
	ErrInsecure = errors.New("transport: listening beyond loopback requires authentication")
	// ErrConfig: a configuration is invalid (the message says which field and why).
	ErrConfig = errors.New("transport: invalid configuration")
	// ErrClosed: the value was closed or shut down.
	ErrClosed = errors.New("transport: closed")
	// ErrNoJetStream: the NATS server has no JetStream.
	ErrNoJetStream = errors.New("transport: the nats server has no jetstream")
	// ErrNoStorage: the JetStream servers have too little storage left for a
	// stream's or bucket's limits (each server that keeps a copy reserves them).
	ErrNoStorage = errors.New("transport: the jetstream servers have too little storage")
	// ErrNotReady: the embedded server did not become ready in time.
	ErrNotReady = errors.New("transport: nats server not ready")
)

// loggerOr returns l, or slog.Default() when l is nil.
func loggerOr(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
