package transport

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
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

// memberlistLog is the io.Writer behind memberlist's *log.Logger: each line
// ("[DEBUG] memberlist: ...") becomes one slog record, at debug except memberlist's
// [ERR] lines, which go out at warn (bad encryption keys, failed pushes).
type memberlistLog struct {
	l   *slog.Logger
	mu  sync.Mutex
	buf []byte // an incomplete line (log.Logger writes whole lines; be safe)
}

func (m *memberlistLog) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buf = append(m.buf, p...)
	for {
		i := bytes.IndexByte(m.buf, '\n')
		if i < 0 {
			break
		}
		m.line(string(m.buf[:i]))
		m.buf = m.buf[i+1:]
	}
	if len(m.buf) == 0 {
		m.buf = nil
	}
	return len(p), nil
}

func (m *memberlistLog) line(s string) {
	level := slog.LevelDebug
	if rest, ok := strings.CutPrefix(s, "[ERR] "); ok {
		level, s = slog.LevelWarn, rest
	} else if _, rest, ok := strings.Cut(s, "] "); ok && strings.HasPrefix(s, "[") {
		s = rest
	}
	s = strings.TrimPrefix(s, "memberlist: ")
	m.l.Log(context.Background(), level, "memberlist: "+s)
}

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
