package replay

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed+1)) }

// randomOutput returns n bytes of terminal-like output: ASCII, escapes, 2-, 3- and
// 4-byte characters and a few invalid bytes, cut into chunks of 1…8000 bytes.
func randomOutput(rng *rand.Rand, n int) (all []byte, chunks [][]byte) {
	pieces := []string{"hello ", "\r\n", "\x1b[1;32m", "\x1b[0m", "é", "€", "中文", "😀", "\t", "\"\\", "\x00", "\x7f", "\xff", "\xe2\x82", "\u2028"}
	all = make([]byte, 0, n+16)
	const text = "the quick brown fox jumps over the lazy dog 0123456789 ~!@#$%^&*()_+{}|:<>?-=[];',./"
	for len(all) < n {
		if rng.IntN(2) == 0 {
			all = append(all, pieces[rng.IntN(len(pieces))]...)
		} else {
			i := rng.IntN(len(text))
			all = append(all, text[i:i+rng.IntN(len(text)-i)]...)
		}
	}
	all = all[:n]
	for rest := all; len(rest) > 0; {
		k := min(len(rest), 1+rng.IntN(8000))
		chunks = append(chunks, rest[:k])
		rest = rest[k:]
	}
	return all, chunks
}

// writeCast writes chunks as a recording at path, one chunk per millisecond.
func writeCast(t testing.TB, path string, chunks [][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f, Header{Width: 80, Height: 24})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range chunks {
		if err := w.Output(time.Duration(i)*time.Millisecond, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestReadRangeLarge: arbitrary ranges of a 20 MB recording come back exact, and the
// opened Recording holds well under 1 MB.
func TestReadRangeLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	all, chunks := randomOutput(rng, 20<<20)
	path := filepath.Join(t.TempDir(), "large.cast")
	writeCast(t, path, chunks)

	before := heapInUse()
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if held := int64(heapInUse()) - int64(before); held > 1<<20 {
		t.Errorf("the opened recording holds %d bytes of heap, want < 1 MB", held)
	}
	t.Logf("20 MB recording: %d bytes of heap held, %d checkpoints", int64(heapInUse())-int64(before), len(rec.cps))
	runtime.KeepAlive(rec)
	if rec.End() != int64(len(all)) {
		t.Fatalf("End %d, want %d", rec.End(), len(all))
	}
	ranges := [][2]int64{{0, 0}, {0, 1}, {0, int64(len(all))}, {int64(len(all)) - 1, int64(len(all))}, {cpEvery - 3, cpEvery + 3}}
	for range 100 {
		from := rng.Int64N(int64(len(all)))
		ranges = append(ranges, [2]int64{from, min(int64(len(all)), from+rng.Int64N(100_000))})
	}
	for _, r := range ranges {
		got, err := rec.ReadRange(r[0], r[1])
		if err != nil || !bytes.Equal(got, all[r[0]:r[1]]) {
			t.Fatalf("ReadRange(%d, %d): %v (%d bytes), not the bytes written", r[0], r[1], err, len(got))
		}
	}
	for _, r := range [][2]int64{{-1, 0}, {5, 4}, {0, int64(len(all)) + 1}} {
		if _, err := rec.ReadRange(r[0], r[1]); !errors.Is(err, ErrRange) {
			t.Errorf("ReadRange(%d, %d): %v, want ErrRange", r[0], r[1], err)
		}
	}
}

// writeSmall returns a small recording's bytes and its output.
func writeSmall(t *testing.T) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	w, _ := NewWriter(&b, Header{Width: 80, Height: 24})
	_ = w.Output(sec(0.1), []byte("one\r\n"))
	_ = w.Resize(sec(0.2), 100, 30)
	_ = w.Output(sec(0.3), []byte("t\xffwo\r\n"))
	_ = w.Output(sec(0.4), []byte("three\r\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), "one\r\nt\xffwo\r\nthree\r\n"
}

// TestTruncated cuts a recording at every byte of its events: Open keeps every whole
// event and leaves out the cut one, and Refresh picks it up once the rest is written.
func TestTruncated(t *testing.T) {
	full, out := writeSmall(t)
	headerEnd := bytes.IndexByte(full, '\n') + 1
	path := filepath.Join(t.TempDir(), "cut.cast")
	for cut := headerEnd; cut <= len(full); cut++ {
		if err := os.WriteFile(path, full[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		rec, err := Open(path)
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		got, err := rec.ReadRange(0, rec.End())
		if err != nil || !strings.HasPrefix(out, string(got)) {
			t.Fatalf("cut at %d: read %q, %v: not a prefix of the output", cut, got, err)
		}
		midLine := full[cut-1] != '\n' && full[cut-1] != ']'
		if midLine && !rec.Truncated() || cut == len(full) && rec.Truncated() {
			t.Errorf("cut at %d: Truncated %v", cut, rec.Truncated())
		}
		// The writer finishes: Refresh sees everything.
		if err := os.WriteFile(path, full, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := rec.Refresh(); err != nil {
			t.Fatalf("cut at %d: Refresh: %v", cut, err)
		}
		if got, err := rec.ReadRange(0, rec.End()); err != nil || string(got) != out || rec.Truncated() {
			t.Fatalf("cut at %d: after Refresh read %q, %v, truncated %v", cut, got, err, rec.Truncated())
		}
		rec.Close()
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	good, _ := writeSmall(t)
	lines := strings.SplitAfter(string(good), "\n")
	tests := []struct {
		name, content, want string
	}{
		{"empty", "", "is empty"},
		{"not json", "hello\n", "line 1: bad header"},
		{"v1", `{"version": 1, "width": 80, "height": 24, "stdout": []}` + "\n", "only versions 2 and 3"},
		{"no version", `{"width": 80, "height": 24}` + "\n", "no version"},
		{"no size", `{"version": 2}` + "\n", "bad terminal size"},
		{"bad middle line", lines[0] + lines[1] + "[0.1, \"o\"]\n" + lines[2], "line 3:"},
		{"negative time", lines[0] + "[-1, \"o\", \"x\"]\n", "line 2: bad time"},
		{"bad resize", lines[0] + "[1, \"r\", \"80by24\"]\n", "line 2: bad size"},
		{"number output", lines[0] + "[1, \"o\", 5]\n", "line 2: \"o\" data must be a string"},
		{"b without o", lines[0] + "[1, \"b\", \"0:ff\"]\n[1, \"m\", \"x\"]\n", "line 3: a \"b\" event must come right before"},
		{"b not at U+FFFD", lines[0] + "[1, \"b\", \"0:ff\"]\n[1, \"o\", \"abc\"]\n", "line 2: \"b\" position 0 is not a U+FFFD"},
		{"trailing junk", lines[0] + "[1, \"o\", \"x\"] x\n[2, \"o\", \"y\"]\n", "line 2: unexpected"},
		{"negative offset", `{"version": 2, "width": 80, "height": 24, "fleetmux_offset": -5}` + "\n", "negative offset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".cast")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Open: %v\nwant ErrFormat, the path and %q", err, tt.want)
			}
		})
	}
	if _, err := Open(filepath.Join(dir, "missing.cast")); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "replay: ") {
		t.Errorf("Open of a missing file: %v", err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrFormat) {
		t.Errorf("Open of a directory: %v", err)
	}
}

// TestForeignRecording reads a recording in asciinema's own style: spaces in the
// header, null title, extra header fields, input events, blank trailing line.
func TestForeignRecording(t *testing.T) {
	const cast = `{"version": 2, "width": 100, "height": 30, "timestamp": 1504467315.5, "title": null, ` +
		`"env": {"TERM": "xterm", "SHELL": null}, "theme": {"fg": "#fff"}}` + "\n" +
		`[0.248848, "o", "\u001b[1;31mHello \u001b[32mWorld!\u001b[0m\n"]` + "\n" +
		`[1.001376, "i", "ls\r"]` + "\n" +
		`[ 1.5e0 , "o" , "caf\u00e9 \ud83d\ude00 \ud800 x" ]` + "\n" +
		`[1.0, "x", {"status": 0}]` + "\n" +
		"\n"
	path := filepath.Join(t.TempDir(), "foreign.cast")
	if err := os.WriteFile(path, []byte(cast), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	h := rec.Header()
	if h.Width != 100 || h.Title != "" || h.Env["TERM"] != "xterm" || len(h.Env) != 1 || h.Timestamp.UnixMilli() != 1504467315500 {
		t.Errorf("header %+v", h)
	}
	want := "\x1b[1;31mHello \x1b[32mWorld!\x1b[0m\ncafé 😀 \ufffd x"
	got, err := rec.ReadRange(0, rec.End())
	if err != nil || string(got) != want || rec.Duration() != sec(1.5) {
		t.Errorf("output %q, %v, duration %v", got, err, rec.Duration())
	}
	var kinds []string
	_ = rec.Events(t.Context(), Position{}, func(e Event) error { kinds = append(kinds, e.Kind); return nil })
	if strings.Join(kinds, "") != "oiox" {
		t.Errorf("events %v", kinds)
	}
	if _, err := rec.Blocks(); !errors.Is(err, ErrNoIndex) {
		t.Errorf("Blocks without an index: %v", err)
	}
}

// TestRefreshLive reads a recording while it is being written.
func TestRefreshLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.cast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 7) // flushes mid-line
	w, _ := NewWriter(bw, Header{Width: 80, Height: 24})
	_ = w.Flush()
	_ = bw.Flush()
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	var want []byte
	for i := range 300 {
		chunk := []byte(strings.Repeat("é\xff", i%7) + "line\r\n")
		want = append(want, chunk...)
		_ = w.Output(time.Duration(i)*time.Millisecond, chunk)
		_ = w.Flush()
		if err := rec.Refresh(); err != nil {
			t.Fatalf("Refresh %d: %v", i, err)
		}
		got, err := rec.ReadRange(0, rec.End())
		if err != nil || !bytes.HasPrefix(want, got) {
			t.Fatalf("after chunk %d: %q, %v", i, got, err)
		}
	}
	_ = bw.Flush()
	if err := rec.Refresh(); err != nil || rec.End() != int64(len(want)) {
		t.Fatalf("Refresh: %v, End %d, want %d", err, rec.End(), len(want))
	}
}

func BenchmarkOpen(b *testing.B) {
	_, chunks := randomOutput(newRand(5), 20<<20)
	path := filepath.Join(b.TempDir(), "bench.cast")
	writeCast(b, path, chunks)
	b.SetBytes(20 << 20)
	for b.Loop() {
		rec, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		rec.Close()
	}
}

func BenchmarkWriter(b *testing.B) {
	_, chunks := randomOutput(newRand(6), 4<<20)
	b.SetBytes(4 << 20)
	for b.Loop() {
		w, _ := NewWriter(io.Discard, Header{Width: 80, Height: 24})
		for i, c := range chunks {
			_ = w.Output(time.Duration(i), c)
		}
		_ = w.Close()
	}
}

// typicalOutput is mostly ASCII lines with a few colour escapes, like ls or a build log.
func typicalOutput(n int) []byte {
	line := "-rw-r--r-- 1 user user  4096 Nov 22 03:14 \x1b[01;34mdirectory\x1b[0m/ some-file-name.go\r\n"
	return bytes.Repeat([]byte(line), n/len(line)+1)[:n]
}

func BenchmarkWriterTypical(b *testing.B) {
	out := typicalOutput(4 << 20)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		w, _ := NewWriter(io.Discard, Header{Width: 80, Height: 24})
		for i := 0; i < len(out); i += 4096 {
			_ = w.Output(time.Duration(i), out[i:min(len(out), i+4096)])
		}
		_ = w.Close()
	}
}

func BenchmarkOpenTypical(b *testing.B) {
	out := typicalOutput(20 << 20)
	var chunks [][]byte
	for i := 0; i < len(out); i += 4096 {
		chunks = append(chunks, out[i:min(len(out), i+4096)])
	}
	path := filepath.Join(b.TempDir(), "bench.cast")
	writeCast(b, path, chunks)
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		rec, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		rec.Close()
	}
}

// TestConcurrentReads reads a live recording from several goroutines while it grows.
func TestConcurrentReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "conc.cast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, _ := NewWriter(f, Header{Width: 80, Height: 24})
	_ = w.Flush()
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	all, chunks := randomOutput(newRand(9), 2<<20)
	done := make(chan struct{})
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			rng := newRand(uint64(g))
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				end := rec.End()
				from := rng.Int64N(end + 1)
				got, err := rec.ReadRange(from, end)
				if err == nil && !bytes.Equal(got, all[from:end]) {
					err = errors.New("wrong bytes")
				}
				if err == nil {
					_, err = rec.AtOffset(from)
				}
				if err != nil {
					errs <- fmt.Errorf("ReadRange(%d, %d): %w", from, end, err)
					return
				}
			}
		}()
	}
	for i, c := range chunks {
		_ = w.Output(time.Duration(i)*time.Millisecond, c)
		if i%10 == 0 {
			_ = w.Flush()
			if err := rec.Refresh(); err != nil {
				t.Error(err)
			}
		}
	}
	_ = w.Close()
	close(done)
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if err := rec.Refresh(); err != nil || rec.End() != int64(len(all)) {
		t.Errorf("Refresh %v, End %d, want %d", err, rec.End(), len(all))
	}
}

// TestPartOffset: a part of a rotated recording keeps its first byte's session
// offset in the header, and its block index (session offsets) is read shifted by it.
func TestPartOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "part.cast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, Header{Width: 80, Height: 24, Offset: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Output(0, []byte("0123456789")); err != nil || w.Close() != nil || f.Close() != nil {
		t.Fatal(err)
	}
	idx := `{"n":1,"command":"old","start":990,"end":1004,"t":0,"t_end":0}` + "\n" +
		`{"n":2,"command":"new","start":1004,"end":1010,"t":0,"t_end":0}` + "\n"
	if err := os.WriteFile(IndexPath(path), []byte(idx), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if got := rec.Header().Offset; got != 1000 {
		t.Fatalf("header offset %d, want 1000", got)
	}
	if _, err := rec.AtBlock(1); !errors.Is(err, ErrRange) {
		t.Fatalf("block before the part: %v, want ErrRange", err)
	}
	pos, err := rec.AtBlock(2)
	if err != nil || pos.Offset() != 4 {
		t.Fatalf("block 2 at %d (%v), want part offset 4", pos.Offset(), err)
	}
	if _, err := NewWriter(io.Discard, Header{Width: 80, Height: 24, Offset: -1}); err == nil {
		t.Fatal("negative offset accepted")
	}
}
