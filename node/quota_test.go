package node_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/replay"
)

const (
	testCap   = 1 << 20
	testParts = 2
	// slack is how far a part may exceed the cap: one write of the recorder
	// (64 KiB of output, at most 6 bytes of JSON each).
	slack = 6 * 64 << 10
)

func quota(c *node.Config) {
	// The scrollback is smaller than what the tests print (so old output comes from the
	// recording), and it bounds how far the recorder may lag behind the output: 2 MiB
	// leaves a slow, busy test machine room.
	c.RecordingMaxBytes, c.RecordingParts, c.ScrollbackBytes = testCap, testParts, 2<<20
}

// castFiles returns the session's recording parts and their total size.
func castFiles(t *testing.T, dir string) ([]string, int64) {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "output*.cast"))
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, p := range m {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
	}
	return m, total
}

// readHeld reads the output from the oldest offset the node holds to the end,
// waiting (with a deadline) for the recorder to catch up.
func (f *fixture) readHeld(id string) (int64, []byte) {
	f.t.Helper()
	var rd api.ReadReply
	deadline := time.Now().Add(20 * time.Second)
	var got []byte
	from := int64(-1)
	for {
		var r api.ReadRequest
		if from < 0 {
			f.mustCall("read", api.ReadRequest{Session: id, From: 1 << 40, Max: 1}, &rd)
			from = rd.Oldest
			r.From = from
		} else {
			r.From = from + int64(len(got))
		}
		r.Session = id
		f.mustCall("read", r, &rd)
		got = append(got, rd.Data...)
		if from+int64(len(got)) >= rd.End {
			return from, got
		}
		if len(rd.Data) == 0 && time.Now().After(deadline) {
			f.t.Fatalf("read stuck at %d of %d", from+int64(len(got)), rd.End)
		}
	}
}

// A session printing far more than the cap keeps at most RecordingParts parts of
// about the cap each; every part plays in asciinema; read serves the output held,
// exactly, and answers gone for the output dropped.
func TestRecordingQuota(t *testing.T) {
	f := newFixture(t, quota)
	s := f.create(api.CreateRequest{})
	const last = 600000
	// 1 to last in 60 runs of seq: the recorder (a viewer that may lag the output by the
	// scrollback at most) keeps up on a loaded machine too.
	f.run(s.ID, "for i in $(seq 0 59); do seq $((i*10000+1)) $((i*10000+10000)); done")
	f.run(s.ID, "echo after-seq")
	dir := filepath.Join(f.data, "sessions", s.ID)

	from, held := f.readHeld(s.ID)
	if from == 0 {
		t.Fatal("the node still holds the output from offset 0")
	}
	var rd api.ReadReply
	err := f.call("read", api.ReadRequest{Session: s.ID, From: 0}, &rd)
	if code(err) != api.CodeGone {
		t.Fatalf("read of dropped output: %v, want %s", err, api.CodeGone)
	}
	if err := f.call("read", api.ReadRequest{Session: s.ID, From: from - 1}, &rd); code(err) != api.CodeGone {
		t.Fatalf("read just before the oldest held offset: %v, want %s", err, api.CodeGone)
	}
	// The held output is a run of consecutive numbers up to last: no byte lost or
	// doubled across the parts and the scrollback.
	lines := strings.Split(string(held), "\r\n")
	i := 1 // the first line may be cut
	for ; i < len(lines) && lines[i] != strconv.Itoa(last); i++ {
		a, err1 := strconv.Atoi(lines[i])
		b, err2 := strconv.Atoi(lines[i+1])
		if err1 != nil || err2 != nil || b != a+1 {
			t.Fatalf("held output not consecutive at line %d: %q, %q", i, lines[i], lines[i+1])
		}
	}
	if i == len(lines) || int64(len(held)) < testCap {
		t.Fatalf("held output (%d bytes from %d) lacks the end of seq", len(held), from)
	}

	if err := f.node.Close(); err != nil {
		t.Fatal(err)
	}
	parts, total := castFiles(t, dir)
	if len(parts) != testParts || total > testParts*(testCap+slack) {
		t.Fatalf("%d parts, %d bytes on disk: want %d parts of at most %d bytes", len(parts), total, testParts, testCap+slack)
	}
	asc := testutil.NeedTool(t, "asciinema")
	var recorded []byte
	rotated := parts[0]
	if filepath.Base(rotated) == "output.cast" {
		rotated = parts[1]
	}
	// The rotated part is named after its first offset. The recorder may have rotated
	// once more after readHeld took the oldest offset (it follows the output behind the
	// scrollback, and Close flushes it), so that offset is from or later, never earlier.
	start, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(rotated), "output."), ".cast"), 10, 64)
	if err != nil || start < from || start >= from+int64(len(held)) {
		t.Fatalf("rotated part %s: want output.<offset>.cast, the offset %d or later and held", filepath.Base(rotated), from)
	}
	for _, p := range []string{rotated, filepath.Join(dir, "output.cast")} {
		rec, err := replay.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if off := rec.Header().Offset; off != start+int64(len(recorded)) {
			t.Fatalf("%s: header offset %d, want %d", filepath.Base(p), off, start+int64(len(recorded)))
		}
		if p != rotated {
			// The block index keeps session offsets: the part's header shifts them.
			if _, err := rec.AtBlock(1); !errors.Is(err, replay.ErrRange) {
				t.Fatalf("block 1 (started in a dropped part): %v, want ErrRange", err)
			}
			pos, err := rec.AtBlock(2)
			if err != nil {
				t.Fatal(err)
			}
			tail, _ := rec.ReadRange(pos.Offset(), rec.End())
			if !bytes.HasPrefix(tail, []byte("after-seq\r\n")) {
				t.Fatalf("block 2 of the current part starts with %q", string(tail[:min(len(tail), 40)]))
			}
		}
		out, err := rec.ReadRange(0, rec.End())
		rec.Close()
		if err != nil {
			t.Fatal(err)
		}
		if cat := testutil.RunAsciinema(t, asc, "cat", exportV2(t, p)); !bytes.Equal(cat, out) {
			t.Fatalf("asciinema cat %s: %d bytes, the recording holds %d", filepath.Base(p), len(cat), len(out))
		}
		recorded = append(recorded, out...)
	}
	// What was read is what the parts hold from there on: nothing lost or doubled. The
	// parts may run a little past it (the prompt after the last command can reach the
	// recording after readHeld read to the end as it stood).
	skip := int(start - from)
	n := min(len(recorded), len(held)-skip)
	if n < len(recorded)-4096 || !bytes.Equal(recorded[:n], held[skip:skip+n]) {
		t.Fatalf("the parts on disk (%d bytes from %d) are not the held output from there (%d bytes from %d)", len(recorded), start, len(held), from)
	}
	// The block index still lists the block, with its whole range.
	entries, err := replay.OpenIndex(filepath.Join(dir, "output.cast"))
	if err != nil || len(entries) != 2 || entries[0].End-entries[0].Start < last {
		t.Fatalf("block index: %+v, %v", entries, err)
	}
}

// The attack of issue 15 (#9): a session that prints without end (here 12 MB of
// `yes`) keeps at most the quota on disk. Without the quota the recording grows by
// every byte.
func TestRecordingQuotaBoundsFlood(t *testing.T) {
	f := newFixture(t, quota)
	s := f.create(api.CreateRequest{})
	f.run(s.ID, "yes | head -c 12000000")
	if err := f.node.Close(); err != nil {
		t.Fatal(err)
	}
	parts, total := castFiles(t, filepath.Join(f.data, "sessions", s.ID))
	if len(parts) > testParts || total > testParts*(testCap+slack) {
		t.Fatalf("%d parts, %d bytes on disk after 12 MB of output: want at most %d parts of at most %d bytes", len(parts), total, testParts, testCap+slack)
	}
}

// exportV2 converts the recording at path (v3, as the node writes them) to asciicast v2
// in a file of the test's, for Debian's asciinema 2.2, which reads v2 only; the
// conversion keeps every output byte.
func exportV2(t *testing.T, path string) string {
	t.Helper()
	src, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	out := filepath.Join(t.TempDir(), "v2.cast")
	dst, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := replay.Convert(dst, src, 2, nil); err != nil {
		t.Fatal(err)
	}
	return out
}
