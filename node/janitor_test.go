package node_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// closedRecordings makes n closed sessions with some output on a node that then
// stops, and returns their recording directories.
func closedRecordings(t *testing.T, n int) (string, []string) {
	f := newFixture(t)
	var dirs []string
	for range n {
		s := f.create(api.CreateRequest{})
		f.run(s.ID, "seq 1 2000")
		dirs = append(dirs, filepath.Join(f.data, "sessions", s.ID))
	}
	if err := f.node.Close(); err != nil {
		t.Fatal(err)
	}
	return f.data, dirs
}

// age sets the modification time of every file in dir to d ago.
func age(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	old := time.Now().Add(-d)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Chtimes(filepath.Join(dir, e.Name()), old, old); err != nil {
			t.Fatal(err)
		}
	}
}

func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// startAgain starts a node on data (without a real bus) and stops it at the end.
func startAgain(t *testing.T, data string, mod func(*node.Config)) *node.Node {
	t.Helper()
	cfg := node.Config{Name: "n1", DataDir: data, Bus: nopBus{}, Verifier: testutil.NewTrust(t).Verifier}
	mod(&cfg)
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// The retention deletes the recordings of closed sessions last written longer ago,
// and keeps the newer ones.
func TestRecordingRetention(t *testing.T) {
	data, dirs := closedRecordings(t, 2)
	age(t, dirs[0], 48*time.Hour)
	n := startAgain(t, data, func(c *node.Config) { c.RecordingRetention = 24 * time.Hour })
	testutil.Eventually(t, 10*time.Second, func() bool { return !exists(dirs[0]) }, "the old recording to be deleted")
	n.Close() // the sweep has finished
	if !exists(filepath.Join(dirs[1], "output.cast")) {
		t.Fatal("the recent recording was deleted")
	}
}

// Over the node-wide cap the least recently written recording of a closed session
// goes first (not the lowest id), and only as many as needed.
func TestRecordingsCap(t *testing.T) {
	data, dirs := closedRecordings(t, 3)
	age(t, dirs[0], 2*time.Hour)
	age(t, dirs[1], 3*time.Hour) // the oldest
	age(t, dirs[2], time.Hour)
	keep := dirSize(t, dirs[0]) + dirSize(t, dirs[2])
	n := startAgain(t, data, func(c *node.Config) { c.RecordingsMaxBytes, c.RecordingRetention = keep, -1 })
	testutil.Eventually(t, 10*time.Second, func() bool { return !exists(dirs[1]) }, "the oldest recording to be deleted")
	n.Close()
	if !exists(dirs[0]) || !exists(dirs[2]) {
		t.Fatal("more recordings deleted than the cap needs")
	}
}

// Over the node-wide cap a live session loses its oldest rotated parts (its current
// part stays), and read answers gone for their output.
func TestRecordingsCapLive(t *testing.T) {
	const nodeCap = testCap + testCap/2
	f := newFixture(t, quota, func(c *node.Config) { c.RecordingParts, c.RecordingsMaxBytes = 4, nodeCap })
	s := f.create(api.CreateRequest{})
	f.run(s.ID, "seq 1 600000")
	f.readHeld(s.ID) // the recorder has caught up
	dir := filepath.Join(f.data, "sessions", s.ID)
	// The janitor sweeps after each rotation; the current part may grow after the last.
	bound := int64(nodeCap + testCap + slack)
	testutil.Eventually(t, 10*time.Second, func() bool { _, total := castFiles(t, dir); return total <= bound }, "the recordings within the node's cap")
	from, held := f.readHeld(s.ID)
	var rd api.ReadReply
	if err := f.call("read", api.ReadRequest{Session: s.ID, From: from - 1}, &rd); code(err) != api.CodeGone {
		t.Fatalf("read of a dropped part: %v, want %s", err, api.CodeGone)
	}
	// Without the node-wide cap the session would hold 3 full rotated parts.
	if len(held) >= 3*testCap {
		t.Fatalf("%d bytes held from offset %d: the node-wide cap dropped no part", len(held), from)
	}
	if parts, _ := castFiles(t, dir); len(parts) > 3 {
		t.Fatalf("%d parts on disk", len(parts))
	}
}
