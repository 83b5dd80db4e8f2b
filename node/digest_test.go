package node_test

import (
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

// TestDigestBlocks: digest_blocks gives, in one request, every session's blocks
// finished after since (and those still running), leaving out the older ones
// and the sessions with none.
func TestDigestBlocks(t *testing.T) {
	f := newFixture(t)
	a, b, quiet := f.create(api.CreateRequest{}), f.create(api.CreateRequest{}), f.create(api.CreateRequest{})
	old := f.run(a.ID, "echo before")
	since := *old.Block.FinishedAt
	f.run(a.ID, "true")
	f.run(b.ID, "false")
	f.run(b.ID, "echo x")
	var db api.DigestBlocks
	f.mustCall(api.VerbDigestBlocks, api.DigestBlocksRequest{Since: since}, &db)
	if got := db.Sessions[a.ID]; len(got) != 1 || got[0].Command != "true" || got[0].N != 2 {
		t.Errorf("%s: %+v, want its block 2 alone", a.ID, got)
	}
	if got := db.Sessions[b.ID]; len(got) != 2 || got[0].ExitCode == nil || *got[0].ExitCode != 1 || got[1].Command != "echo x" {
		t.Errorf("%s: %+v, want both its blocks", b.ID, got)
	}
	if _, ok := db.Sessions[quiet.ID]; ok || len(db.Sessions) != 2 {
		t.Errorf("sessions %v: want %s and %s only", db.Sessions, a.ID, b.ID)
	}
}
