package controller

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// auditLog appends audit records to a JSONL file (when configured) and publishes
// them on the controller's audit subject, within auditDelay (see delayQueue).
// Safe for concurrent use.
type auditLog struct {
	c   *Controller
	pub *delayQueue[[]byte]
	mu  sync.Mutex // guards f
	f   *os.File
}

// auditDelay is how long, at most, a record waits to be published.
const auditDelay = 2 * time.Millisecond

func openAudit(c *Controller, path string) (*auditLog, error) {
	subject := c.subj.Audit(c.cfg.Name)
	a := &auditLog{c: c, pub: newDelayQueue(auditDelay, func(b []byte) {
		if err := c.cfg.Bus.Publish(subject, nil, b); err != nil {
			c.log.Warn("audit record not published", "err", err)
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
	r.Node = a.c.cfg.Name
	b, _ := json.Marshal(r)
	a.mu.Lock()
	if a.f != nil {
		if _, err := a.f.Write(append(b, '\n')); err != nil {
			a.c.log.Error("audit log write failed", "err", err)
		}
	}
	a.mu.Unlock()
	a.pub.Add(b)
	a.c.log.Info("audit", "actor", r.Actor, "action", r.Action, "session", r.Session, "result", r.Result)
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
