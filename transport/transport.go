// Package transport holds the concrete network plumbing of fleetmux: the NATS client
// (Connect, *Conn: publishing, the node API as a NATS micro service, requests), an
// embedded nats-server (StartServer), JetStream stream setup (EnsureStreams), the
// fleet's NATS identities (Authority: operator, account and user JWTs with the
// permissions of Identity, a TLS CA; Creds: .creds files), which nodes hold a NATS
// connection (Presence: connect/disconnect advisories) and a memberlist adapter
// for gossip (StartGossip).
//
// node and controller never import this package: they define small interfaces (a bus,
// a gossip) that *Conn and *Gossip satisfy, and cmd/fleetmux wires them together.
//
// Conventions: everything listens on loopback unless configured otherwise, and a
// listener beyond loopback requires authentication (the fleet's NATS authority, with
// TLS; a gossip encryption key) or its constructor fails with ErrInsecure, and so
// does a plain-text NATS connection beyond loopback. Callbacks from the
// NATS client and from memberlist never block: they hand work to goroutines owned by
// the value that registered them, and Close/Shutdown waits for those goroutines.
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
	// ErrMetaTooLarge: gossip metadata over MaxMetaSize bytes.
	ErrMetaTooLarge = errors.New("transport: gossip metadata too large")
	// ErrJoin: no gossip seed could be joined.
	ErrJoin = errors.New("transport: gossip join failed")
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
