package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzOpen: any file content opens or gives an error (never a panic), and whatever
// opens is consistent: all output reads back, events add up to it, seeks work.
func FuzzOpen(f *testing.F) {
	for _, name := range []string{"golden.cast", "golden3.cast"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-7])
	}
	const h = `{"version":2,"width":80,"height":24}` + "\n"
	for _, s := range []string{
		"", "\n", "{}", h, h + "[1, \"o\", \"x\"]", h + "\n\n[1e3, \"o\", \"\\ud83d\\ude00\"]\n",
		h + "[0.5, \"b\", \"1:ff\"]\n[0.5, \"o\", \"a\ufffdb\"]\n", h + "[0.5, \"b\", \"0:ff 0:fe\"]\n[0.5, \"o\", \"\ufffd\"]\n",
		h + "[2, \"r\", \"10x10\"]\n[1, \"o\", \"é\"]\n[1, \"m\", \"\"]\n", h + "[1, \"x\", {\"a\": [1, 2]}]\n",
		h + "[-0, \"o\", \"\\u0000\"]\n", h + "[1, \"o\", \"\xff\"]\n",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.cast")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		rec, err := Open(path)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "replay: ") {
				t.Fatalf("error without the package prefix: %v", err)
			}
			return
		}
		defer rec.Close()
		all, err := rec.ReadRange(0, rec.End())
		if err != nil || int64(len(all)) != rec.End() {
			t.Fatalf("ReadRange(0, End %d): %d bytes, %v", rec.End(), len(all), err)
		}
		var out []byte
		var last time.Duration
		err = rec.Events(context.Background(), Position{}, func(e Event) error {
			if e.T < last || e.T > rec.Duration() {
				t.Fatalf("event time %v after %v (duration %v)", e.T, last, rec.Duration())
			}
			last = e.T
			if e.Kind == "o" {
				out = append(out, e.Data...)
			}
			return nil
		})
		if err != nil || !bytes.Equal(out, all) {
			t.Fatalf("Events gave %q (%v), ReadRange %q", out, err, all)
		}
		for _, off := range []int64{0, rec.End() / 2, rec.End()} {
			pos, err := rec.AtOffset(off)
			if err != nil || pos.Offset() != off {
				t.Fatalf("AtOffset(%d): %v, %v", off, pos, err)
			}
			var b bytes.Buffer
			if err := rec.ScreenAt(context.Background(), pos, &b); err != nil || !bytes.Equal(b.Bytes(), all[:off]) {
				t.Fatalf("ScreenAt(%v): %q, %v", pos, b.Bytes(), err)
			}
		}
		if _, err := rec.AtTime(rec.Duration() / 2); err != nil {
			t.Fatalf("AtTime: %v", err)
		}
	})
}

// FuzzReadIndex: any index content reads or gives an error wrapping ErrFormat; what
// reads writes back the same.
func FuzzReadIndex(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "golden.blocks.jsonl"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)-9])
	for _, s := range []string{"", "\n", "null\n", "{}\n", `{"n":1,"start":5,"end":2}` + "\n", `{"n":1}` + "\n{", "[]\n{\"n\":2}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := ReadIndex(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrFormat) || !strings.HasPrefix(err.Error(), "replay: index: line ") {
				t.Fatalf("error %v: want ErrFormat with a line number", err)
			}
			return
		}
		var again bytes.Buffer
		iw := NewIndexWriter(&again)
		for _, e := range es {
			if err := iw.Append(e); err != nil {
				t.Fatalf("Append(%+v) of an entry ReadIndex accepted: %v", e, err)
			}
		}
		es2, err := ReadIndex(&again)
		if err != nil || len(es2) != len(es) {
			t.Fatalf("reread: %d entries, %v; want %d", len(es2), err, len(es))
		}
		for i := range es {
			a, _ := json.Marshal(es[i])
			b, _ := json.Marshal(es2[i])
			if !bytes.Equal(a, b) {
				t.Fatalf("entry %d: %s, reread %s", i, a, b)
			}
		}
	})
}

// FuzzUnquote: the string decoder agrees with encoding/json on every input.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`""`, `"a\nb"`, `"\ud83d\ude00"`, `"\ud800x"`, `"\udc00\ud800\udc00"`, `"\u00e9\/"`, "\"\xff\xc3\"", `"\x"`, `"abc`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want string
		jsonErr := json.Unmarshal(data, &want)
		got, end, err := unquote(nil, data, 0)
		if err == nil && end != len(data) {
			return // more after the string: not a JSON string on its own
		}
		if (err == nil) != (jsonErr == nil) {
			if jsonErr == nil && (len(data) == 0 || data[0] != '"') {
				return // a JSON value that is not a string
			}
			if err == nil && skipSpace(data, end) != len(data) {
				return
			}
			t.Fatalf("unquote(%q): %v; encoding/json: %v", data, err, jsonErr)
		}
		if err == nil && string(got) != want {
			t.Fatalf("unquote(%q) = %q, encoding/json %q", data, got, want)
		}
	})
}

// FuzzWriter: any output, cut anywhere, reads back exact with exact offsets, and every
// line of the file is valid JSON in valid UTF-8.
func FuzzWriter(f *testing.F) {
	f.Add([]byte("héllo\xff wörld 😀"), uint16(3), "mark")
	f.Add([]byte("\xe2\x82"), uint16(1), "\xff")
	f.Add([]byte(goldenOutput), uint16(17), "")
	f.Fuzz(func(t *testing.T, out []byte, cut uint16, label string) {
		var b bytes.Buffer
		w, _ := NewWriter(&b, Header{Width: 80, Height: 24, Title: label})
		k := min(int(cut), len(out))
		_ = w.Output(time.Second, out[:k])
		_ = w.Marker(time.Second, label)
		_ = w.Output(2*time.Second, out[k:])
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if w.Offset() != int64(len(out)) {
			t.Fatalf("Offset %d, want %d", w.Offset(), len(out))
		}
		for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
			if !json.Valid([]byte(l)) {
				t.Fatalf("line %q is not valid JSON", l)
			}
		}
		if got := roundTrip(t, b.Bytes()); got != string(out) {
			t.Fatalf("read back %q, want %q", got, out)
		}
	})
}

func TestIndex(t *testing.T) {
	var b bytes.Buffer
	iw := NewIndexWriter(&b)
	for _, e := range []IndexEntry{{N: 0}, {N: 1, Start: 5, End: 4}, {N: 1, Start: -1}, {N: 1, T: 2, TEnd: 1}} {
		if err := iw.Append(e); err == nil {
			t.Errorf("Append(%+v): no error", e)
		}
	}
	if b.Len() != 0 {
		t.Errorf("refused entries wrote %q", b.String())
	}
	good := []byte(`{"n":1,"command":"a","start":0,"end":3}` + "\n" + `{"n":2,"command":"b","start":3,"end":9,"extra":true}` + "\n")
	tests := []struct {
		name    string
		content string
		n       int
		err     string
	}{
		{"two", string(good), 2, ""},
		{"blank lines", "\n" + string(good) + "\n\n", 2, ""},
		{"truncated last line", string(good) + `{"n":3,"comm`, 2, ""},
		{"complete last line without newline", string(good) + `{"n":3}`, 3, ""},
		{"malformed middle line", `{"n":1}` + "\n" + `{"n":` + "\n" + `{"n":3}` + "\n", 0, "replay: index: line 2: "},
		{"invalid entry", `{"n":1}` + "\n" + `{"n":2,"start":4,"end":1}` + "\n", 0, "line 2: block 2: bad output range"},
		{"wrong type", `{"n":"one"}` + "\n", 0, "line 1: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, err := ReadIndex(strings.NewReader(tt.content))
			if tt.err != "" {
				if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error %v, want ErrFormat and %q", err, tt.err)
				}
				return
			}
			if err != nil || len(es) != tt.n {
				t.Errorf("%d entries, %v; want %d", len(es), err, tt.n)
			}
		})
	}
	if got := []string{IndexPath("/d/s1.cast"), IndexPath("/d/s1"), IndexPath("x.cast.cast")}; !reflect.DeepEqual(got,
		[]string{"/d/s1.blocks.jsonl", "/d/s1.blocks.jsonl", "x.cast.blocks.jsonl"}) {
		t.Errorf("IndexPath: %v", got)
	}
}
