package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamLimits bounds the JetStream streams of EnsureStreams. The zero value gives
// the defaults; a negative size or age means unlimited.
type StreamLimits struct {
	// OutMaxBytes bounds api.StreamOut (raw output). Default 1 GiB.
	OutMaxBytes int64
	// OutMaxAge bounds how long output is kept. Default 24h.
	OutMaxAge time.Duration
	// EventsMaxBytes bounds api.StreamEvents (block and session events).
	// Default 256 MiB.
	EventsMaxBytes int64
	// EventsMaxAge bounds how long events are kept. Default 7 days.
	EventsMaxAge time.Duration
	// AuditMaxBytes bounds api.StreamAudit (audit records). Default 256 MiB.
	AuditMaxBytes int64
	// AuditMaxAge bounds how long audit records are kept. Default 7 days.
	AuditMaxAge time.Duration
	// Replicas is the number of copies in a JetStream cluster. Default 1; see
	// Replicas (the function) for the number a cluster calls for.
	Replicas int
}

func (l StreamLimits) withDefaults() StreamLimits {
	size := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return -1
		}
		return v
	}
	age := func(v, def time.Duration) time.Duration {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0 // JetStream: unlimited
		}
		return v
	}
	l.OutMaxBytes = size(l.OutMaxBytes, 1<<30)
	l.OutMaxAge = age(l.OutMaxAge, 24*time.Hour)
	l.EventsMaxBytes = size(l.EventsMaxBytes, 256<<20)
	l.EventsMaxAge = age(l.EventsMaxAge, 7*24*time.Hour)
	l.AuditMaxBytes = size(l.AuditMaxBytes, 256<<20)
	l.AuditMaxAge = age(l.AuditMaxAge, 7*24*time.Hour)
	if l.Replicas <= 0 {
		l.Replicas = 1
	}
	return l
}

// StreamConfigs are the configurations EnsureStreams applies, in order:
// api.StreamOut keeps <prefix>.out.>, api.StreamEvents <prefix>.block.> and
// <prefix>.event.>, api.StreamAudit <prefix>.audit.> (apart, so that what a
// subscriber may read is whole streams' worth), all on file storage, discarding
// the oldest messages at a limit. Events comes before Audit: a stream that an older
// version created with the audit subjects gives them up before Audit takes them.
func StreamConfigs(prefix string, lim StreamLimits) []jetstream.StreamConfig {
	if prefix == "" {
		prefix = api.DefaultPrefix
	}
	lim = lim.withDefaults()
	return []jetstream.StreamConfig{
		{
			Name:        api.StreamOut,
			Description: "fleetmux session output (raw PTY bytes; header " + api.HeaderOffset + ")",
			Subjects:    []string{prefix + "." + api.KindOut + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			Storage:     jetstream.FileStorage,
			MaxBytes:    lim.OutMaxBytes,
			MaxAge:      lim.OutMaxAge,
			Replicas:    lim.Replicas,
		},
		{
			Name:        api.StreamEvents,
			Description: "fleetmux block, session and agent events (JSON)",
			Subjects: []string{
				prefix + "." + api.KindBlock + ".>",
				prefix + "." + api.KindEvent + ".>",
				prefix + "." + api.KindAgent + ".>",
			},
			Retention: jetstream.LimitsPolicy,
			Discard:   jetstream.DiscardOld,
			Storage:   jetstream.FileStorage,
			MaxBytes:  lim.EventsMaxBytes,
			MaxAge:    lim.EventsMaxAge,
			Replicas:  lim.Replicas,
		},
		{
			Name:        api.StreamAudit,
			Description: "fleetmux audit records (JSON; controllers only)",
			Subjects:    []string{prefix + "." + api.KindAudit + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			Storage:     jetstream.FileStorage,
			MaxBytes:    lim.AuditMaxBytes,
			MaxAge:      lim.AuditMaxAge,
			Replicas:    lim.Replicas,
		},
	}
}

// EnsureStreams creates or updates the streams of StreamConfigs. It waits for the
// connection and retries with short timeouts while JetStream is not ready yet (an
// embedded server may accept connections a moment before its JetStream answers,
// and a cluster needs a meta leader), until ctx is done. It returns an error
// wrapping ErrNoJetStream when the server has no JetStream (or not for this
// account), and fails at once on a configuration the server rejects (for example
// subjects that overlap another stream's).
func EnsureStreams(ctx context.Context, nc *nats.Conn, prefix string, lim StreamLimits) error {
	if prefix != "" {
		if err := api.ValidPrefix(prefix); err != nil {
			return fmt.Errorf("transport: ensure streams: %w", err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("transport: jetstream: %w", err)
	}
	for _, cfg := range StreamConfigs(prefix, lim) {
		if err := ensureStream(ctx, nc, js, cfg); err != nil {
			return err
		}
	}
	return nil
}

// ensureStream creates or updates one stream, retrying transient failures.
func ensureStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	const attemptTimeout = 2 * time.Second
	backoff := 20 * time.Millisecond
	var last error
	for {
		if nc.IsConnected() {
			if err := checkJetStream(ctx, nc, js); err != nil {
				return err
			}
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			_, err := js.CreateOrUpdateStream(actx, cfg)
			cancel()
			if err == nil {
				return nil
			}
			if noStorage(err) {
				return fmt.Errorf("%w: stream %s (%d bytes on each of %d servers): %w", ErrNoStorage, cfg.Name, cfg.MaxBytes, cfg.Replicas, err)
			}
			if !transientJSError(err) {
				return fmt.Errorf("transport: stream %s: %w", cfg.Name, err)
			}
			last = err
		} else {
			last = nats.ErrDisconnected
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("transport: stream %s: %w (last error: %w)", cfg.Name, ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// checkJetStream returns ErrNoJetStream when the connected server says it has no
// JetStream and no other server answers the JetStream API for this account.
func checkJetStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	if has, _ := nc.ConnectedServerJetStream(); has {
		return nil
	}
	if !nc.IsConnected() {
		return nil // cannot tell; the caller retries
	}
	// The server may route the API to JetStream servers of a cluster: ask once.
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := js.AccountInfo(actx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w (%s)", ErrNoJetStream, nc.ConnectedUrlRedacted())
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("%w: not enabled for this account (%s)", ErrNoJetStream, nc.ConnectedUrlRedacted())
	}
	return nil // a timeout or the like: let the stream request decide
}

// MaxReplicas is the most copies fleetmux asks JetStream for: three servers
// survive the loss of one.
const MaxReplicas = 3

// Replicas is the number of copies fleetmux's streams and buckets keep: want
// when it is positive, else as many as the cluster nc is connected to has
// servers (as the servers advertise them), at most MaxReplicas; 1 outside a
// cluster.
func Replicas(nc *nats.Conn, want int) int {
	if want > 0 {
		return want
	}
	if nc.ConnectedClusterName() == "" {
		return 1
	}
	return min(max(len(nc.Servers()), 1), MaxReplicas)
}

// noStorage reports whether a JetStream API failure is the servers' lack of
// storage for the limits asked (JSStorageResourcesExceededErr).
func noStorage(err error) bool {
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode == 10047
	}
	var je jetstream.JetStreamError
	return errors.As(err, &je) && je.APIError() != nil && je.APIError().ErrorCode == 10047
}

// transientJSError reports whether a JetStream API failure may go away by itself.
func transientJSError(err error) bool {
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		return ae.Code == 503 || ae.Code == 408
	}
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		return je.APIError().Code == 503 || je.APIError().Code == 408
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || // a stream without a leader (no quorum)
		errors.Is(err, nats.ErrNoStreamResponse)
}
