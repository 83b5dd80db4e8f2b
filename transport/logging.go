package transport

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// natsServerLog routes nats-server's logger into slog. Notices, debug and trace go
// out at debug (the embedded server is an implementation detail of fleetmux);
// warnings and errors keep their level, because they are what an operator needs to
// see when the embedded server misbehaves.
// The last error is kept to explain a failed start.
type natsServerLog struct {
	l         *slog.Logger
	mu        sync.Mutex
	lastErr   string
	fatalSeen bool
}

func (n *natsServerLog) logf(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if level >= slog.LevelError {
		msg := fmt.Sprintf(format, v...)
		n.mu.Lock()
		n.lastErr = msg
		n.mu.Unlock()
		n.l.Log(ctx, level, msg)
		return
	}
	if !n.l.Enabled(ctx, level) {
		return
	}
	n.l.Log(ctx, level, fmt.Sprintf(format, v...))
}

func (n *natsServerLog) Noticef(format string, v ...any) { n.logf(slog.LevelDebug, format, v) }
func (n *natsServerLog) Warnf(format string, v ...any)   { n.logf(slog.LevelWarn, format, v) }
func (n *natsServerLog) Fatalf(format string, v ...any) {
	n.mu.Lock()
	n.fatalSeen = true
	n.mu.Unlock()
	n.logf(slog.LevelError, format, v)
}
func (n *natsServerLog) Errorf(format string, v ...any) { n.logf(slog.LevelError, format, v) }
func (n *natsServerLog) Debugf(format string, v ...any) { n.logf(slog.LevelDebug, format, v) }
func (n *natsServerLog) Tracef(format string, v ...any) { n.logf(slog.LevelDebug-4, format, v) }

// natsServerLog's last error, to explain a failed start.
func (n *natsServerLog) lastErrorSuffix() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lastErr == "" {
		return ""
	}
	return ": " + n.lastErr
}

// fatal reports whether the server logged a fatal error (it cannot run).
func (n *natsServerLog) fatal() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fatalSeen
}
