package replay

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGolden3 writes the golden steps as asciicast v3 (testdata/golden3.cast: intervals,
// a "term" header, an exit event) and reads them back as the v2 golden file reads.
func TestGolden3(t *testing.T) {
	var cast bytes.Buffer
	w, err := NewWriter(&cast, goldenHeader)
	if err != nil {
		t.Fatal(err)
	}
	writeGolden(t, w)
	checkGolden(t, "golden3.cast", cast.Bytes())

	rec, err := Open(filepath.Join("testdata", "golden3.cast"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	h := rec.Header()
	if h.Version != 3 || h.Width != 80 || h.Height != 24 || h.Title != "golden" || h.Env["TERM"] != "xterm-256color" {
		t.Errorf("header %+v", h)
	}
	if rec.End() != int64(len(goldenOutput)) || rec.Duration() != sec(2.5) {
		t.Errorf("End %d Duration %v", rec.End(), rec.Duration())
	}
	var kinds []string
	_ = rec.Events(t.Context(), Position{}, func(e Event) error { kinds = append(kinds, e.Kind+"@"+e.T.String()); return nil })
	want := "o@100ms m@500ms o@600ms o@700ms r@1s o@1.2s o@1.2s m@2s o@2.5s o@2.5s"
	if strings.Join(kinds, " ") != want {
		t.Errorf("events %v, want %s", kinds, want)
	}
	got, err := rec.ReadRange(0, rec.End())
	if err != nil || string(got) != goldenOutput {
		t.Errorf("ReadRange: %q, %v", got, err)
	}

	// The same recording in either version converts to the other, byte for byte.
	v2, err := os.ReadFile(filepath.Join("testdata", "golden.cast"))
	if err != nil {
		t.Fatal(err)
	}
	var to2, to3 bytes.Buffer
	if err := Convert(&to2, bytes.NewReader(cast.Bytes()), 2, nil); err != nil || to2.String() != string(v2) {
		t.Errorf("v3 → v2 (%v):\n%s\nwant\n%s", err, to2.Bytes(), v2)
	}
	if err := Convert(&to3, bytes.NewReader(v2), 3, nil); err != nil || to3.String() != cast.String() {
		t.Errorf("v2 → v3 (%v):\n%s\nwant\n%s", err, to3.Bytes(), cast.Bytes())
	}
}

// TestExitAndStart: an "x" event reads back with its status; a part whose header has
// fleetmux_start counts its first interval from there.
func TestExitAndStart(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b, Header{Width: 10, Height: 5, Start: sec(100), Offset: 7})
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Output(sec(100.5), []byte("hi"))
	_ = w.Exit(sec(101), 2)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := `{"version":3,"term":{"cols":10,"rows":5},"fleetmux_offset":7,"fleetmux_start":100}` + "\n" +
		`[0.500000, "o", "hi"]` + "\n" + `[0.500000, "x", "2"]` + "\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	path := filepath.Join(t.TempDir(), "part.cast")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	var evs []Event
	_ = rec.Events(t.Context(), Position{}, func(e Event) error { evs = append(evs, e); return nil })
	if len(evs) != 2 || evs[0].T != sec(100.5) || evs[1].Kind != "x" || evs[1].Data != "2" || evs[1].T != sec(101) {
		t.Errorf("events %+v", evs)
	}
	if rec.Header().Start != sec(100) || rec.Duration() != sec(101) {
		t.Errorf("start %v duration %v", rec.Header().Start, rec.Duration())
	}
}

// TestTranscoderPieces: a recording re-encoded in pieces cut anywhere (as a node
// serves it) is the recording re-encoded whole, and a rotated recording's parts, one
// after the other, make one recording with the times of both.
func TestTranscoderPieces(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "golden3.cast"))
	if err != nil {
		t.Fatal(err)
	}
	hl := bytes.IndexByte(src, '\n') + 1
	h, err := parseHeader(src[:hl-1])
	if err != nil {
		t.Fatal(err)
	}
	for _, version := range []int{2, 3} {
		var whole bytes.Buffer
		if err := Convert(&whole, bytes.NewReader(src), version, nil); err != nil {
			t.Fatal(err)
		}
		for cut := hl; cut <= len(src); cut++ {
			tc := Transcoder{Version: version}
			out, err := tc.Header(nil, h)
			if err != nil {
				t.Fatal(err)
			}
			var piece []byte
			piece, used, err := tc.Lines(nil, src[hl:cut], h, true)
			if err != nil {
				t.Fatalf("cut %d: %v", cut, err)
			}
			out = append(out, piece...)
			piece, used2, err := tc.Lines(nil, src[hl+used:], h, used == 0)
			if err != nil || hl+used+used2 != len(src) {
				t.Fatalf("cut %d: used %d+%d of %d: %v", cut, used, used2, len(src)-hl, err)
			}
			out = append(out, piece...)
			if string(out) != whole.String() {
				t.Fatalf("v%d cut at %d:\n%s\nwant\n%s", version, cut, out, whole.Bytes())
			}
		}
	}

	// Two parts: the second starts where the first ended (fleetmux_start).
	var p1, p2 bytes.Buffer
	w1, _ := NewWriter(&p1, Header{Width: 10, Height: 5})
	_ = w1.Output(sec(1), []byte("one"))
	_ = w1.Marker(sec(2), BlockLabel(1, "ls"))
	_ = w1.Close()
	w2, _ := NewWriter(&p2, Header{Width: 10, Height: 5, Start: w1.Time(), Offset: 3})
	_ = w2.Output(sec(5), []byte("two"))
	_ = w2.Exit(sec(6), 0)
	_ = w2.Close()
	tc := Transcoder{Label: IndexLabel([]IndexEntry{{N: 1, ExitCode: intp(4)}})}
	out, _ := tc.Header(nil, Header{Width: 10, Height: 5})
	for _, p := range []*bytes.Buffer{&p1, &p2} {
		b := p.Bytes()
		hl := bytes.IndexByte(b, '\n') + 1
		ph, _ := parseHeader(b[:hl-1])
		var used int
		if out, used, err = tc.Lines(out, b[hl:], ph, true); err != nil || used != len(b)-hl {
			t.Fatalf("part: used %d of %d, %v", used, len(b)-hl, err)
		}
	}
	want := `{"version":3,"term":{"cols":10,"rows":5}}` + "\n" + `[1.000000, "o", "one"]` + "\n" +
		`[1.000000, "m", "block 1: ls ⏎ exit 4"]` + "\n" + `[3.000000, "o", "two"]` + "\n" + `[1.000000, "x", "0"]` + "\n"
	if string(out) != want {
		t.Errorf("parts:\n%s\nwant\n%s", out, want)
	}
	n, cmd, exit, ok := MarkerBlock("block 1: ls ⏎ exit 4")
	if !ok || n != 1 || cmd != "ls" || exit == nil || *exit != 4 {
		t.Errorf("MarkerBlock: %d %q %v %v", n, cmd, exit, ok)
	}
}

// FuzzConvert: any file content converts to v2 and v3 or gives an error (never a
// panic), and a recording that opens converts to recordings with the same output, the
// same event kinds and the same times (to the microsecond), in either version.
func FuzzConvert(f *testing.F) {
	for _, name := range []string{"golden.cast", "golden3.cast"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-9])
	}
	const h3 = `{"version":3,"term":{"cols":80,"rows":24},"fleetmux_start":1.5}` + "\n"
	for _, s := range []string{
		h3, h3 + "# a comment\n[0.5, \"o\", \"x\"]\n[1e-3, \"x\", \"0\"]\n", h3 + "[0.1, \"b\", \"0:ff\"]\n[0, \"o\", \"\ufffd\"]\n",
		h3 + "[0.5, \"r\", \"3x2\"]\n[0.5, \"m\", \"block 2: ls\"]\n", h3 + "[1e9, \"o\", \"x\"]\n[1e9, \"o\", \"y\"]\n",
		`{"version":3}` + "\n", `{"version":3,"term":{"cols":0,"rows":2}}` + "\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "in.cast")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		orig, err := Open(path)
		if err != nil {
			var sink bytes.Buffer
			_ = Convert(&sink, bytes.NewReader(data), 3, nil)
			return
		}
		defer orig.Close()
		want := eventsOf(t, orig)
		for _, version := range []int{2, 3} {
			var out bytes.Buffer
			if err := Convert(&out, bytes.NewReader(data), version, nil); err != nil {
				t.Fatalf("v%d: Open read it, Convert failed: %v", version, err)
			}
			p := filepath.Join(dir, "out.cast")
			if err := os.WriteFile(p, out.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			conv, err := Open(p)
			if err != nil {
				t.Fatalf("v%d: the conversion does not open: %v\n%s", version, err, out.Bytes())
			}
			got := eventsOf(t, conv)
			conv.Close()
			if got != want {
				t.Fatalf("v%d: events\n%s\nwant\n%s", version, got, want)
			}
		}
	})
}

// eventsOf lists a recording's events (kind, time in µs, data) as text.
func eventsOf(t *testing.T, rec *Recording) string {
	var b strings.Builder
	err := rec.Events(t.Context(), Position{}, func(e Event) error {
		if e.Kind == "r" {
			e.Data = fmt.Sprintf("%dx%d", e.Cols, e.Rows) // "010x1" is written "10x1"
		}
		fmt.Fprintf(&b, "%s %d %q\n", e.Kind, e.T.Microseconds(), e.Data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
