package testutil

import (
	"bufio"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
)

// AuditSub subscribes to node's audit records on the NATS server at url with a
// raw NATS client (closed at t's cleanup); the records arrive on the channel
// (64 buffered).
func AuditSub(t testing.TB, url, node string) (*nats.Conn, chan api.AuditRecord) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	recs := make(chan api.AuditRecord, 64)
	done := make(chan struct{}) // closed at cleanup: a full channel no longer blocks the callback
	t.Cleanup(func() { close(done) })
	if _, err := nc.Subscribe(api.Subjects{}.Audit(node), func(m *nats.Msg) {
		var r api.AuditRecord
		if json.Unmarshal(m.Data, &r) == nil {
			select {
			case recs <- r:
			case <-done:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc, recs
}

// NextAudit waits (10s at most) for the next record of action, dropping others.
func NextAudit(t testing.TB, recs chan api.AuditRecord, action string) api.AuditRecord {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-recs:
			if r.Action == action {
				return r
			}
		case <-deadline:
			t.Fatalf("no audit record of %s", action)
		}
	}
}

// NextAudits waits up to 10 s for the next record of each of actions, in any
// order (records of concurrent requests may be published in either order), and
// returns them by action; records of other actions are skipped.
func NextAudits(t testing.TB, recs chan api.AuditRecord, actions ...string) map[string]api.AuditRecord {
	t.Helper()
	out := make(map[string]api.AuditRecord, len(actions))
	deadline := time.After(10 * time.Second)
	for len(out) < len(actions) {
		select {
		case r := <-recs:
			if _, seen := out[r.Action]; !seen && slices.Contains(actions, r.Action) {
				out[r.Action] = r
			}
		case <-deadline:
			t.Fatalf("audit records of %v: got only %v", actions, slices.Collect(maps.Keys(out)))
		}
	}
	return out
}

// AuditRecords reads the JSONL audit file at path; a line that is not a record
// fails t.
func AuditRecords(t testing.TB, path string) []api.AuditRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []api.AuditRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var r api.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: a line is not a record: %v", path, err)
		}
		out = append(out, r)
	}
	return out
}

// Capture subscribes nc to subject, as anyone who may subscribe could, and
// returns a func that waits (10s at most) for the first message captured there
// and then unsubscribes.
func Capture(t testing.TB, nc *nats.Conn, subject string) (first func() *nats.Msg) {
	t.Helper()
	captured := make(chan *nats.Msg, 1)
	spy, err := nc.Subscribe(subject, func(m *nats.Msg) {
		select {
		case captured <- m:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() *nats.Msg {
		t.Helper()
		defer spy.Unsubscribe()
		select {
		case m := <-captured:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no request captured")
			return nil
		}
	}
}
