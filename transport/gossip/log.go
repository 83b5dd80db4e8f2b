package gossip

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
)

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
