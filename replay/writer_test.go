package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func sec(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func intp(i int) *int { return &i }

// goldenSteps is the fixed sequence of calls behind testdata/golden.cast.
func writeGolden(t *testing.T, w *Writer) {
	t.Helper()
	steps := []func() error{
		func() error { return w.Output(sec(0.1), []byte("$ ls\r\n")) },
		func() error { return w.Marker(sec(0.5), "block 1: ls") },
		func() error { return w.Output(sec(0.6), []byte("caf\xc3")) }, // é split
		func() error {
			return w.Output(sec(0.7), []byte("\xa9 \x1b[31mred\x1b[0m \"q\" \\ \t €😀 <&>\r\n"))
		},
		func() error { return w.Resize(sec(1), 120, 40) },
		func() error { return w.Output(sec(1.2), []byte("bad \xff byte\x00\x7f\u2028\u0085!")) },
		func() error { return w.Output(sec(0.9), []byte("earlier")) }, // written at 1.2
		func() error { return w.Marker(sec(2.0000004), "block 2: \"quoted\" <tag>\xff") },
		func() error { return w.Output(sec(2.5), []byte("end\xe2\x82")) }, // never completed
		w.Close,
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}

// goldenOutput is the output writeGolden gives, byte for byte.
const goldenOutput = "$ ls\r\ncaf\xc3\xa9 \x1b[31mred\x1b[0m \"q\" \\ \t €😀 <&>\r\n" +
	"bad \xff byte\x00\x7f\u2028\u0085!earlierend\xe2\x82"

var goldenHeader = Header{
	Width: 80, Height: 24, Timestamp: time.Unix(1700000000, 0), Title: "golden",
	Env: map[string]string{"TERM": "xterm-256color", "SHELL": "/bin/bash"}, Command: "bash",
	IdleTimeLimit: 2 * time.Second,
}

var goldenIndex = []IndexEntry{
	{N: 1, Command: "ls", Cwd: "/tmp", ExitCode: intp(0), StartedAt: time.Date(2026, 11, 22, 3, 14, 7, 0, time.UTC),
		FinishedAt: time.Date(2026, 11, 22, 3, 14, 8, 0, time.UTC), Start: 6, End: 46, T: 0.5, TEnd: 0.7},
	{N: 2, Command: `echo "<tag>"`, Cwd: "/tmp", StartedAt: time.Date(2026, 11, 22, 3, 14, 9, 0, time.UTC),
		FinishedAt: time.Date(2026, 11, 22, 3, 14, 10, 0, time.UTC), Start: 71, End: 76, T: 2, TEnd: 2.5},
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./replay -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what was written (go test -update rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestGolden writes the v2 golden files (golden.cast is the v2 format as recordings
// had it: TestGolden3 has v3).
func TestGolden(t *testing.T) {
	var cast bytes.Buffer
	h := goldenHeader
	h.Version = 2
	w, err := NewWriter(&cast, h)
	if err != nil {
		t.Fatal(err)
	}
	writeGolden(t, w)
	if w.Offset() != int64(len(goldenOutput)) || w.Pending() != 0 || w.Invalid() != 3 {
		t.Errorf("Offset %d Pending %d Invalid %d, want %d 0 3", w.Offset(), w.Pending(), w.Invalid(), len(goldenOutput))
	}
	checkGolden(t, "golden.cast", cast.Bytes())

	var idx bytes.Buffer
	iw := NewIndexWriter(&idx)
	for _, e := range goldenIndex {
		if err := iw.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	checkGolden(t, "golden.blocks.jsonl", idx.Bytes())
}

// TestGoldenRead reads the golden files back: header, events, output and index.
func TestGoldenRead(t *testing.T) {
	rec, err := Open(filepath.Join("testdata", "golden.cast"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	h := rec.Header()
	if h.Width != 80 || h.Height != 24 || !h.Timestamp.Equal(goldenHeader.Timestamp) || h.Title != "golden" ||
		h.Command != "bash" || h.Env["TERM"] != "xterm-256color" || len(h.Env) != 2 || h.IdleTimeLimit != 2*time.Second {
		t.Errorf("header %+v", h)
	}
	if rec.End() != int64(len(goldenOutput)) || rec.Duration() != sec(2.5) || rec.Truncated() {
		t.Errorf("End %d Duration %v Truncated %v", rec.End(), rec.Duration(), rec.Truncated())
	}
	got, err := rec.ReadRange(0, rec.End())
	if err != nil || string(got) != goldenOutput {
		t.Errorf("ReadRange: %q, %v\nwant %q", got, err, goldenOutput)
	}
	var kinds []string
	var out strings.Builder
	err = rec.Events(t.Context(), Position{}, func(e Event) error {
		kinds = append(kinds, e.Kind+"@"+e.T.String())
		if e.Kind == "o" {
			if e.Offset != int64(out.Len()) {
				t.Errorf("event %d: offset %d, want %d", len(kinds), e.Offset, out.Len())
			}
			out.WriteString(e.Data)
		}
		if e.Kind == "r" && (e.Cols != 120 || e.Rows != 40 || e.Data != "120x40") {
			t.Errorf("resize event %+v", e)
		}
		return nil
	})
	want := "o@100ms m@500ms o@600ms o@700ms r@1s o@1.2s o@1.2s m@2s o@2.5s o@2.5s"
	if err != nil || strings.Join(kinds, " ") != want || out.String() != goldenOutput {
		t.Errorf("events %v (%v), want %s; output %q", kinds, err, want, out.String())
	}
	blocks, err := rec.Blocks()
	if err != nil || len(blocks) != 2 || blocks[1].Command != `echo "<tag>"` || *blocks[0].ExitCode != 0 || blocks[1].ExitCode != nil {
		t.Errorf("blocks %+v, %v", blocks, err)
	}
}

func TestWriterErrors(t *testing.T) {
	for _, h := range []Header{{}, {Width: 80}, {Width: -1, Height: 24}, {Width: 80, Height: maxDim + 1},
		{Width: 80, Height: 24, IdleTimeLimit: -1}} {
		if _, err := NewWriter(&bytes.Buffer{}, h); err == nil || !strings.HasPrefix(err.Error(), "replay: ") {
			t.Errorf("NewWriter(%+v): %v, want an error", h, err)
		}
	}
	var b bytes.Buffer
	w, err := NewWriter(&b, Header{Width: 80, Height: 24})
	if err != nil {
		t.Fatal(err)
	}
	for _, sz := range [][2]int{{0, 24}, {80, 0}, {-3, 3}, {maxDim + 1, 3}} {
		if err := w.Resize(0, sz[0], sz[1]); err == nil {
			t.Errorf("Resize %v: no error", sz)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Output(0, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Output after Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if b.String() != "{\"version\":3,\"term\":{\"cols\":80,\"rows\":24}}\n" {
		t.Errorf("a recording without events: %q", b.String())
	}

	// A failing underlying writer: its error is returned, then kept.
	if _, err := NewWriter(failWriter{}, Header{Width: 80, Height: 24}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("NewWriter on a failing writer: %v", err)
	}
	fw, err := NewWriter(&failAfter{n: 50}, Header{Width: 80, Height: 24})
	if err != nil {
		t.Fatal(err)
	}
	_ = fw.Output(0, []byte("x"))
	if err := fw.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Flush: %v", err)
	}
	if err := fw.Marker(0, "m"); err == nil {
		t.Error("Marker after a failed Flush: no error")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// failAfter takes n bytes, then fails.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

// castLines returns the decoded events of a recording written to b.
func castLines(t *testing.T, b []byte) [][3]any {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var out [][3]any
	for _, l := range lines[1:] {
		var ev []any
		if err := json.Unmarshal([]byte(l), &ev); err != nil || len(ev) != 3 {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, [3]any{ev[0], ev[1], ev[2]})
	}
	return out
}

// TestUTF8Split splits a text of 1-, 2-, 3- and 4-byte characters at every byte
// position (and into single bytes): no event splits a character, and the output
// round-trips through Open and ReadRange.
func TestUTF8Split(t *testing.T) {
	const text = "a é € 😀 ü中𝄞z"
	splits := [][][]byte{}
	for i := 0; i <= len(text); i++ {
		splits = append(splits, [][]byte{[]byte(text[:i]), []byte(text[i:])})
	}
	var bytewise [][]byte
	for i := range len(text) {
		bytewise = append(bytewise, []byte{text[i]})
	}
	splits = append(splits, bytewise)
	for n, chunks := range splits {
		var b bytes.Buffer
		w, err := NewWriter(&b, Header{Width: 80, Height: 24})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range chunks {
			if err := w.Output(sec(float64(i)), c); err != nil {
				t.Fatal(err)
			}
			if w.Offset()+int64(w.Pending()) != int64(len(bytes.Join(chunks[:i+1], nil))) {
				t.Fatalf("split %d: Offset %d + Pending %d after chunk %d", n, w.Offset(), w.Pending(), i)
			}
		}
		if err := w.Flush(); err != nil || w.Pending() != 0 || w.Invalid() != 0 {
			t.Fatalf("split %d: Flush %v, Pending %d, Invalid %d", n, err, w.Pending(), w.Invalid())
		}
		for _, ev := range castLines(t, b.Bytes()) {
			if s := ev[2].(string); ev[1] != "o" || strings.ContainsRune(s, utf8.RuneError) || !utf8.ValidString(s) {
				t.Fatalf("split %d: event %v splits a character", n, ev)
			}
		}
		if got := roundTrip(t, b.Bytes()); got != text {
			t.Fatalf("split %d: read back %q", n, got)
		}
	}
}

// roundTrip opens the recording b and reads all of its output.
func roundTrip(t *testing.T, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.cast")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	got, err := rec.ReadRange(0, rec.End())
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}

// TestInvalidBytes: invalid UTF-8 becomes U+FFFD in the file and comes back exact.
func TestInvalidBytes(t *testing.T) {
	tests := []struct {
		name, out string
		invalid   int64
	}{
		{"lone continuation", "a\x80b", 1},
		{"truncated 3-byte then ASCII", "\xe2\x82z", 2},
		{"overlong", "\xc0\xaf", 2},
		{"surrogate", "\xed\xa0\x80", 3},
		{"ff fe", "\xff\xfe", 2},
		{"real U+FFFD next to a bad byte", "\ufffd\xff\ufffd", 1},
		{"long", strings.Repeat("é\xff", 40000), 40000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			w, _ := NewWriter(&b, Header{Width: 80, Height: 24})
			if err := w.Output(0, []byte(tt.out)); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if w.Invalid() != tt.invalid || w.Offset() != int64(len(tt.out)) {
				t.Errorf("Invalid %d Offset %d, want %d %d", w.Invalid(), w.Offset(), tt.invalid, len(tt.out))
			}
			if !utf8.Valid(b.Bytes()) {
				t.Error("the file is not valid UTF-8")
			}
			if got := roundTrip(t, b.Bytes()); got != tt.out {
				t.Errorf("read back %q", got)
			}
		})
	}
}
