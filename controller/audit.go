package controller

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// auditLog appends audit records to a JSONL file (when configured) and publishes
// them on the controller's audit subject, within auditDelay (see delayQueue).
// Safe for concurrent use.
type auditLog struct {
	name string // the controller's: every record's Node
	log  *slog.Logger
	pub  *delayQueue[[]byte]
	mu   sync.Mutex // guards f
	f    *os.File
}

// auditDelay is how long, at most, a record waits to be published.
const auditDelay = 2 * time.Millisecond

// openAudit opens the audit log of the controller name: records are published on
// subject, and appended to the file path when it is set.
func openAudit(bus Bus, subject, name, path string, log *slog.Logger) (*auditLog, error) {
	a := &auditLog{name: name, log: log, pub: newDelayQueue(auditDelay, func(b []byte) {
		if err := bus.Publish(subject, nil, b); err != nil {
			log.Warn("audit record not published", "subject", subject, "err", err)
		}
	})}
	if path == "" {
		return a, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("controller: audit log: %w", err)
	}
	a.f = f
	return a, nil
}

// record writes one audit record: to the file, on the bus, and to the log.
func (a *auditLog) record(r api.AuditRecord) {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	r.Node = a.name
	b, _ := json.Marshal(r)
	a.mu.Lock()
	if a.f != nil {
		if _, err := a.f.Write(append(b, '\n')); err != nil {
			a.log.Error("audit log write failed", "err", err)
		}
	}
	a.mu.Unlock()
	a.pub.Add(b)
	a.log.Info("audit", "actor", r.Actor, "action", r.Action, "session", r.Session, "result", r.Result)
}

func (a *auditLog) close() error {
	a.pub.Close()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}
