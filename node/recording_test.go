package node_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
	"github.com/fleetmux/fleetmux/replay"
)

// fetchRecording reads a session's recording with the recording verb the way the
// controller strings it together: piece by piece (at most max bytes of a part each),
// part after part, the transcoder's time carried from one piece to the next.
func (f *fixture) fetchRecording(id string, format, max int) []byte {
	f.t.Helper()
	req := api.RecordingRequest{Session: id, Format: format, Part: -1, Header: true, Max: max}
	var parts []int64
	var out []byte
	for range 100000 {
		var rr api.RecordingReply
		f.mustCall(api.VerbRecording, req, &rr)
		if parts == nil {
			parts = rr.Parts
		}
		out = append(out, rr.Data...)
		req.Header, req.TUS = false, rr.TUS
		if rr.Next < rr.End {
			req.Part, req.From, req.End = rr.Part, rr.Next, rr.End
			continue
		}
		i := slices.Index(parts, rr.Part)
		if i == len(parts)-1 {
			return out
		}
		req.Part, req.From, req.End = parts[i+1], 0, 0
	}
	f.t.Fatal("the recording verb made no progress")
	return nil
}

// TestRecordingVerb: a recording rotated into several parts, read in small pieces
// in v3 and in v2, is one recording: its output is the session's output from the
// oldest part kept, byte for byte; the markers of the blocks it holds sit at their
// blocks' starts with their exit codes; the exit status is its last event. A closed
// session's recording is served while it is kept; an unknown one is not_found.
func TestRecordingVerb(t *testing.T) {
	f := newFixture(t, func(c *node.Config) {
		c.RecordingMaxBytes, c.RecordingParts, c.ScrollbackBytes = 32<<10, 3, 2<<20
	})
	s := f.create(api.CreateRequest{})
	f.run(s.ID, "seq 1 40000")
	f.run(s.ID, "echo last-é; (exit 2)")
	f.mustCall("input", api.InputRequest{Session: s.ID, Data: "exit 7\n"}, nil)
	var rd api.ReadReply
	testutil.Eventually(t, 20*time.Second, func() bool {
		var si api.Session
		f.mustCall("get", api.SessionRequest{Session: s.ID}, &si)
		return si.State == api.StateExited
	}, "the session exits")
	dir := filepath.Join(f.data, "sessions", s.ID)
	if parts, _ := castFiles(t, dir); len(parts) != 3 {
		t.Fatalf("%d parts on disk, want 3 (rotated)", len(parts))
	}
	// The index gets a block once the node has published its end, which may come
	// after the session is seen exited.
	var idx []replay.IndexEntry
	var err error
	testutil.Eventually(t, 10*time.Second, func() bool {
		idx, err = replay.OpenIndex(filepath.Join(dir, "output.cast"))
		return err == nil && len(idx) == 3 // seq, echo, exit
	}, "the block index to hold the three blocks")
	for _, format := range []int{api.RecordingV3, api.RecordingV2} {
		var cast []byte
		testutil.Eventually(t, 20*time.Second, func() bool {
			cast = f.fetchRecording(s.ID, format, 4096)
			return bytes.Contains(cast, []byte(`"x", "7"]`))
		}, "the recording holds the exit")
		path := filepath.Join(t.TempDir(), "r.cast")
		if err := os.WriteFile(path, cast, 0o600); err != nil {
			t.Fatal(err)
		}
		rec, err := replay.Open(path)
		if err != nil {
			t.Fatalf("v%d: %v", format, err)
		}
		h := rec.Header()
		if h.Version != format || h.Offset == 0 {
			t.Errorf("v%d: header %+v: want its version and the oldest part's offset", format, h)
		}
		got, err := rec.ReadRange(0, rec.End())
		if err != nil {
			t.Fatal(err)
		}
		f.mustCall("read", api.ReadRequest{Session: s.ID, From: h.Offset, Max: len(got)}, &rd)
		want := rd.Data
		for len(want) < len(got) && len(rd.Data) > 0 {
			f.mustCall("read", api.ReadRequest{Session: s.ID, From: h.Offset + int64(len(want)), Max: len(got) - len(want)}, &rd)
			want = append(want, rd.Data...)
		}
		if !bytes.Equal(got, want) || rd.End != h.Offset+int64(len(got)) {
			t.Fatalf("v%d: the recording's output (%d bytes from %d) is not the session's (%d bytes, end %d)", format, len(got), h.Offset, len(want), rd.End)
		}
		var kinds []string
		var markers []replay.Event
		_ = rec.Events(t.Context(), replay.Position{}, func(e replay.Event) error {
			if e.Kind != "o" {
				kinds = append(kinds, e.Kind)
			}
			if e.Kind == "m" {
				markers = append(markers, e)
			}
			return nil
		})
		if len(kinds) == 0 || kinds[len(kinds)-1] != "x" {
			t.Errorf("v%d: events %v, want the exit last", format, kinds)
		}
		var kept []replay.IndexEntry // the blocks that start in the parts kept
		for _, b := range idx {
			if b.Start >= h.Offset {
				kept = append(kept, b)
			}
		}
		if len(kept) != 2 || len(markers) != len(kept) {
			t.Fatalf("v%d: markers %+v, blocks kept %+v", format, markers, kept)
		}
		for i, m := range markers {
			b := kept[i]
			if want := replay.BlockLabel(b.N, b.Command) + replay.ExitSuffix + strconv.Itoa(*b.ExitCode); m.Data != want || m.Offset+h.Offset != b.Start {
				t.Errorf("v%d: marker %q at %d, want %q at %d", format, m.Data, m.Offset+h.Offset, want, b.Start)
			}
		}
		rec.Close()
	}
	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)
	if cast := f.fetchRecording(s.ID, 0, 0); !bytes.Contains(cast, []byte("last-é")) {
		t.Error("a closed session's recording is not served")
	}
	if err := f.call(api.VerbRecording, api.RecordingRequest{Session: "s999", Part: -1}, nil); code(err) != api.CodeNotFound {
		t.Errorf("recording of an unknown session: %v", err)
	}
	if err := f.call(api.VerbRecording, api.RecordingRequest{Session: s.ID, Part: -1, Format: 4}, nil); code(err) != api.CodeBadRequest {
		t.Errorf("format 4: %v", err)
	}
}
