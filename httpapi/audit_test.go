package httpapi_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestAuditRotation: the audit file rotates at AuditMaxBytes and keeps
// AuditKeep old files, through audited HTTP requests.
func TestAuditRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	f, bus := newFakeFixture(t, map[string]int{"n1": 0}, func(c *controller.Config) {
		c.AuditFile, c.AuditMaxBytes, c.AuditKeep = path, 2000, 2
	})
	bus.handle("n1", "close", reply(api.Session{Node: "n1", ID: "s1", State: api.StateExited}))
	for range 40 {
		f.Do("DELETE", "/v1/sessions/n1/s1", nil)
	}
	var all []api.AuditRecord
	for _, p := range []string{path + ".2", path + ".1", path} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 2000 || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %d bytes, mode %v", p, st.Size(), st.Mode().Perm())
		}
		all = append(all, testutil.AuditRecords(t, p)...)
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a third old file is kept: %v", err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Time.Before(all[i-1].Time) {
			t.Fatalf("records out of order across the files at %d", i)
		}
	}
	if len(all) < 10 {
		t.Errorf("%d records in the kept files", len(all))
	}
}
