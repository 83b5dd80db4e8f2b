package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/internal/delay"
)

// auditLog appends audit records to a JSONL file (when configured) and publishes
// them on the controller's audit subject, within auditDelay (see package delay).
// Safe for concurrent use.
type auditLog struct {
	name string // the controller's: every record's Node
	log  *slog.Logger
	pub  *delay.Queue[[]byte]
	file auditFile
	mu   sync.Mutex // guards f, size
	f    *os.File
	size int64 // bytes in f
}

// Defaults of the audit file's rotation (Config.AuditMaxBytes, AuditKeep).
const (
	DefaultAuditMaxBytes = 64 << 20
	DefaultAuditKeep     = 5
)

// auditFile is where the records go on disk, and when the file rotates.
type auditFile struct {
	path     string // "": no file
	maxBytes int64  // rotate before a record would take the file beyond it; <= 0: never
	keep     int    // rotated files kept: path.1 (the newest) … path.keep
}

// auditDelay is how long, at most, a record waits to be published.
const auditDelay = 2 * time.Millisecond

// openAudit opens the audit log of the controller name: records are published on
// subject, and appended to the file path when it is set.
func openAudit(bus Bus, subject, name string, file auditFile, log *slog.Logger) (*auditLog, error) {
	a := &auditLog{name: name, log: log, file: file, pub: delay.New(auditDelay, func(b []byte) {
		if err := bus.Publish(subject, nil, b); err != nil {
			log.Warn("audit record not published", "subject", subject, "err", err)
		}
	})}
	if file.path == "" {
		return a, nil
	}
	if err := a.open(); err != nil {
		return nil, fmt.Errorf("controller: audit log: %w", err)
	}
	return a, nil
}

// open opens the audit file for appending. a.mu is held (or a is not shared yet).
func (a *auditLog) open() error {
	f, err := datadir.OpenFile(a.file.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	a.f, a.size = f, st.Size()
	return nil
}

// rotate renames the file to path.1 (path.1 to path.2, …, dropping the one past
// keep) and opens a new one. a.mu is held.
func (a *auditLog) rotate() error {
	if err := a.f.Close(); err != nil {
		a.log.Warn("audit log close", "err", err)
	}
	a.f = nil
	p := a.file.path
	for i := a.file.keep - 1; i >= 1; i-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", p, i), fmt.Sprintf("%s.%d", p, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(p, p+".1"); err != nil {
		return err
	}
	return a.open()
}

// record writes one audit record: to the file, on the bus, and to the log.
func (a *auditLog) record(r api.AuditRecord) {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	r.Node = a.name
	b, _ := json.Marshal(r)
	a.mu.Lock()
	line := append(b, '\n')
	if a.f != nil && a.file.maxBytes > 0 && a.size > 0 && a.size+int64(len(line)) > a.file.maxBytes {
		if err := a.rotate(); err != nil {
			a.log.Error("audit log rotation failed", "err", err)
			if a.f == nil { // try to go on in the same file
				if err := a.open(); err != nil {
					a.log.Error("audit log reopen failed", "err", err)
				}
			}
		}
	}
	if a.f != nil {
		n, err := a.f.Write(line)
		a.size += int64(n)
		if err != nil {
			a.log.Error("audit log write failed", "err", err)
		}
	}
	a.mu.Unlock()
	a.pub.Add(b)
	a.log.Info("audit", "actor", r.Actor, "principal", r.Principal, "action", r.Action, "session", r.Session, "result", r.Result)
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
