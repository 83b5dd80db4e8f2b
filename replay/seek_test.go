package replay

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The seek recording: its output and events.
const seekOutput = "hello\r\n" + "one\r\n" + "twoé\r\n" + "three\r\n" // 0, 7, 12, 19, 26

// writeSeekCast writes the seek recording and, with index, its block index.
func writeSeekCast(t testing.TB, dir string, index bool) string {
	t.Helper()
	path := filepath.Join(dir, "seek.cast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, _ := NewWriter(f, Header{Width: 80, Height: 24})
	steps := []error{
		w.Output(sec(0.1), []byte("hello\r\n")),
		w.Marker(sec(0.5), "block 1"),
		w.Output(sec(1), []byte("one\r\n")),
		w.Resize(sec(1.5), 100, 30),
		w.Output(sec(2), []byte("twoé\r\n")),
		w.Marker(sec(3), "block 2"),
		w.Output(sec(3.5), []byte("three\r\n")),
		w.Close(),
	}
	if err := errors.Join(steps...); err != nil {
		t.Fatal(err)
	}
	if index {
		idx, err := os.Create(IndexPath(path))
		if err != nil {
			t.Fatal(err)
		}
		defer idx.Close()
		iw := NewIndexWriter(idx)
		for _, e := range []IndexEntry{
			{N: 1, Command: "one", Start: 7, End: 12, T: 0.5, TEnd: 1},
			{N: 2, Command: "two", Start: 19, End: 26, T: 3, TEnd: 3.5},
			{N: 3, Command: "cd /", Start: 26, End: 26, T: 3.5, TEnd: 3.5},
		} {
			if err := iw.Append(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	return path
}

func openSeek(t *testing.T, index bool) *Recording {
	t.Helper()
	rec, err := Open(writeSeekCast(t, t.TempDir(), index))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	return rec
}

// eventsFrom lists the events from pos as "kind:data" strings.
func eventsFrom(t *testing.T, rec *Recording, pos Position) string {
	t.Helper()
	var evs []string
	err := rec.Events(t.Context(), pos, func(e Event) error {
		evs = append(evs, fmt.Sprintf("%s@%d:%q", e.Kind, e.Offset, e.Data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(evs, " ")
}

func TestSeek(t *testing.T) {
	rec := openSeek(t, true)
	tests := []struct {
		name  string
		seek  func() (Position, error)
		off   int64
		at    time.Duration
		first string // the first event from the position
	}{
		{"time 0", func() (Position, error) { return rec.AtTime(0) }, 0, 0, `o@0:"hello\r\n"`},
		{"time of the first event", func() (Position, error) { return rec.AtTime(sec(0.1)) }, 7, sec(0.1), `m@7:"block 1"`},
		{"time after a marker", func() (Position, error) { return rec.AtTime(sec(0.7)) }, 7, sec(0.7), `o@7:"one\r\n"`},
		{"time between", func() (Position, error) { return rec.AtTime(sec(2.5)) }, 19, sec(2.5), `m@19:"block 2"`},
		{"time past the end", func() (Position, error) { return rec.AtTime(time.Hour) }, 26, sec(3.5), ``},
		{"offset 0", func() (Position, error) { return rec.AtOffset(0) }, 0, sec(0.1), `o@0:"hello\r\n"`},
		{"offset inside an event", func() (Position, error) { return rec.AtOffset(3) }, 3, sec(0.1), `o@3:"lo\r\n"`},
		{"offset after a marker", func() (Position, error) { return rec.AtOffset(7) }, 7, sec(1), `o@7:"one\r\n"`},
		{"offset after a resize", func() (Position, error) { return rec.AtOffset(12) }, 12, sec(2), `o@12:"twoé\r\n"`},
		{"offset inside a character", func() (Position, error) { return rec.AtOffset(16) }, 16, sec(2), `o@16:"\xa9\r\n"`},
		{"offset at the end", func() (Position, error) { return rec.AtOffset(26) }, 26, sec(3.5), ``},
		{"block 1", func() (Position, error) { return rec.AtBlock(1) }, 7, sec(1), `o@7:"one\r\n"`},
		{"block 2", func() (Position, error) { return rec.AtBlock(2) }, 19, sec(3.5), `o@19:"three\r\n"`},
		{"empty block at the end", func() (Position, error) { return rec.AtBlock(3) }, 26, sec(3.5), ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pos, err := tt.seek()
			if err != nil {
				t.Fatal(err)
			}
			if pos.Offset() != tt.off || pos.Time() != tt.at {
				t.Errorf("position %v, want offset %d at %v", pos, tt.off, tt.at)
			}
			var screen bytes.Buffer
			if err := rec.ScreenAt(t.Context(), pos, &screen); err != nil || screen.String() != seekOutput[:tt.off] {
				t.Errorf("ScreenAt wrote %q, %v; want %q", screen.String(), err, seekOutput[:tt.off])
			}
			if evs := eventsFrom(t, rec, pos); !strings.HasPrefix(evs, tt.first) || (tt.first == "") != (evs == "") {
				t.Errorf("events from the position: %s\nwant them to start with %s", evs, tt.first)
			}
		})
	}
}

func TestSeekErrors(t *testing.T) {
	rec := openSeek(t, true)
	if _, err := rec.AtTime(-time.Second); !errors.Is(err, ErrRange) {
		t.Errorf("AtTime(-1s): %v", err)
	}
	for _, off := range []int64{-1, 27} {
		if _, err := rec.AtOffset(off); !errors.Is(err, ErrRange) {
			t.Errorf("AtOffset(%d): %v", off, err)
		}
	}
	for _, n := range []int{0, 4, -1} {
		_, err := rec.AtBlock(n)
		if !errors.Is(err, ErrNoBlock) || !strings.Contains(err.Error(), "seek.cast has blocks 1 to 3") {
			t.Errorf("AtBlock(%d): %v", n, err)
		}
	}
	if _, err := openSeek(t, false).AtBlock(1); !errors.Is(err, ErrNoIndex) || !strings.Contains(err.Error(), "seek.cast") {
		t.Errorf("AtBlock without an index: %v", err)
	}
	far, _ := rec.AtTime(time.Hour) // 7 events in: past the end of a 1-event recording
	short := writeShort(t)
	if err := short.ScreenAt(t.Context(), far, &bytes.Buffer{}); !errors.Is(err, ErrRange) {
		t.Errorf("ScreenAt with a position past the end: %v", err)
	}
	if err := short.Events(t.Context(), far, func(Event) error { return nil }); !errors.Is(err, ErrRange) {
		t.Errorf("Events from a position past the end: %v", err)
	}
}

// writeShort opens a recording of one event.
func writeShort(t *testing.T) *Recording {
	t.Helper()
	var b bytes.Buffer
	w, _ := NewWriter(&b, Header{Width: 80, Height: 24})
	_ = w.Output(0, []byte("x"))
	_ = w.Close()
	path := filepath.Join(t.TempDir(), "short.cast")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	return rec
}

// TestSeekEveryOffset: at every offset, what ScreenAt writes and what Events gives
// from there make up the whole output, on a recording with many checkpoints.
func TestSeekEveryOffset(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  *Recording
		out  string
	}{
		{"small", openSeek(t, false), seekOutput},
		{"large", openLarge(t), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			all, err := rec.ReadRange(0, rec.End())
			if err != nil {
				t.Fatal(err)
			}
			step := max(1, rec.End()/31)
			for off := int64(0); off <= rec.End(); off += step {
				pos, err := rec.AtOffset(off)
				if err != nil {
					t.Fatal(err)
				}
				var b bytes.Buffer
				if err := rec.ScreenAt(t.Context(), pos, &b); err != nil {
					t.Fatal(err)
				}
				err = rec.Events(t.Context(), pos, func(e Event) error {
					if e.Kind == "o" {
						if e.Offset != int64(b.Len()) {
							return fmt.Errorf("event at offset %d after %d bytes", e.Offset, b.Len())
						}
						b.WriteString(e.Data)
					}
					return nil
				})
				if err != nil || !bytes.Equal(b.Bytes(), all) {
					t.Fatalf("offset %d: ScreenAt + Events gave %d bytes (%v), want the %d of the output", off, b.Len(), err, len(all))
				}
				// The byte at off was written at pos.Time(): AtTime then is past it,
				// and just before then is not.
				if tp, err := rec.AtTime(pos.Time()); err != nil || off < rec.End() && tp.Offset() <= off {
					t.Fatalf("offset %d: AtTime(%v) = %v, %v", off, pos.Time(), tp, err)
				}
				if pos.Time() > 0 {
					if tp, err := rec.AtTime(pos.Time() - time.Microsecond); err != nil || tp.Offset() > off {
						t.Fatalf("offset %d: AtTime(%v) = %v, %v", off, pos.Time()-time.Microsecond, tp, err)
					}
				}
			}
		})
	}
}

// openLarge opens a 1 MB recording (16 checkpoints).
func openLarge(t *testing.T) *Recording {
	t.Helper()
	_, chunks := randomOutput(newRand(3), 1<<20)
	path := filepath.Join(t.TempDir(), "large.cast")
	writeCast(t, path, chunks)
	rec, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	return rec
}

// fakeTerm records what ScreenAt gives it.
type fakeTerm struct {
	bytes.Buffer
	log []string
}

func (f *fakeTerm) Resize(cols, rows int) {
	f.log = append(f.log, fmt.Sprintf("%dx%d after %q", cols, rows, f.String()))
}

func TestScreenAtResizes(t *testing.T) {
	rec := openSeek(t, false)
	for _, tt := range []struct {
		off  int64
		want string
	}{{7, ""}, {12, `100x30 after "hello\r\none\r\n"`}, {26, `100x30 after "hello\r\none\r\n"`}} {
		pos, _ := rec.AtOffset(tt.off)
		var term fakeTerm
		if err := rec.ScreenAt(t.Context(), pos, &term); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(term.log, ", "); got != tt.want {
			t.Errorf("offset %d: resizes %s, want %s", tt.off, got, tt.want)
		}
	}
}
