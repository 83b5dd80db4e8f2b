package replay

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

func runAsciinema(t *testing.T, bin string, args ...string) []byte {
	return testutil.RunAsciinema(t, bin, args...)
}

// TestAsciinema: asciinema cat and play (Debian's 2.2 reads v2 only) accept a v2
// recording, and a v3 one converted to v2, with split UTF-8, colours, resizes, markers,
// invalid bytes ("b" events) and an exit event, and print its output exactly (with
// U+FFFD for each invalid byte).
func TestAsciinema(t *testing.T) {
	for _, version := range []int{2, 3} {
		t.Run(fmt.Sprint("v", version), func(t *testing.T) { testAsciinema(t, version) })
	}
}

func testAsciinema(t *testing.T, version int) {
	bin := testutil.NeedTool(t, "asciinema")
	path := filepath.Join(t.TempDir(), "accept.cast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f, Header{Version: version, Width: 80, Height: 24, Timestamp: time.Now(), Title: "acceptance",
		Env: map[string]string{"TERM": "xterm-256color"}, Command: "bash", IdleTimeLimit: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	chunks := []string{
		"$ echo \x1b[1;31mred\x1b[0m \x1b[38;5;42mgreen\x1b[0m\r\n",
		"caf\xc3", "\xa9 \xe2\x82", "\xac \xf0\x9f", "\x98\x80 中文 \"quoted\" \\ back\tslash\r\n",
		"\x1b[?1049h\x1b[2J\x1b[Halt screen\x1b[?1049l",
		"line\u2028sep\u0085nel\x00nul\x7fdel\r\n",
	}
	var want bytes.Buffer
	for i, c := range chunks {
		if i == 2 {
			if err := w.Resize(time.Duration(i)*100*time.Millisecond, 120, 40); err != nil {
				t.Fatal(err)
			}
		}
		if i == 4 {
			if err := w.Marker(time.Duration(i)*100*time.Millisecond, "block 1: echo"); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Output(time.Duration(i)*100*time.Millisecond, []byte(c)); err != nil {
			t.Fatal(err)
		}
		want.WriteString(c)
	}
	valid := want.String()
	// Invalid bytes: asciinema shows U+FFFD for each.
	if err := w.Output(time.Second, []byte("bad \xff\xfe end\r\n")); err != nil {
		t.Fatal(err)
	}
	valid += "bad \ufffd\ufffd end\r\n"
	if err := w.Exit(time.Second, 3); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if version == 3 {
		// asciinema 2.2 refuses v3 ("only asciicast v1 and v2 formats can be
		// opened"): the v2 export is what it reads.
		v3, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var v2 bytes.Buffer
		if err := Convert(&v2, bytes.NewReader(v3), 2, nil); err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(t.TempDir(), "export.cast")
		if err := os.WriteFile(path, v2.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if w.Invalid() != 2 {
		t.Errorf("Invalid %d, want 2", w.Invalid())
	}

	if got := runAsciinema(t, bin, "cat", path); string(got) != valid {
		t.Errorf("asciinema cat printed\n%q\nwant\n%q", got, valid)
	}
	if got := runAsciinema(t, bin, "play", "-s", "20", path); string(got) != valid {
		t.Errorf("asciinema play printed\n%q\nwant\n%q", got, valid)
	}
}
