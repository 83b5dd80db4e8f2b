package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/replay"
)

// castStep is one call on a replay.Writer.
type castStep struct {
	t          time.Duration
	out        string // Output when not empty
	mark       string // else Marker when not empty
	cols, rows int    // else Resize
}

// writeRecording writes a recording (and a block index when blocks is not nil) in a
// temporary directory and returns its path and its output.
func writeRecording(t *testing.T, cols, rows int, steps []castStep, blocks []replay.IndexEntry) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s1.cast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := replay.NewWriter(f, replay.Header{Width: cols, Height: rows})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, s := range steps {
		switch {
		case s.out != "":
			err = w.Output(s.t, []byte(s.out))
			out.WriteString(s.out)
		case s.mark != "":
			err = w.Marker(s.t, s.mark)
		default:
			err = w.Resize(s.t, s.cols, s.rows)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if blocks != nil {
		idx, err := os.Create(replay.IndexPath(path))
		if err != nil {
			t.Fatal(err)
		}
		defer idx.Close()
		iw := replay.NewIndexWriter(idx)
		for _, b := range blocks {
			if err := iw.Append(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	return path, out.String()
}

// shellRecording is two commands at a prompt, 60 s apart, then a cleared screen.
func shellRecording(t *testing.T) (string, string) {
	t.Helper()
	return writeRecording(t, 40, 6, []castStep{
		{t: sec(0.5), out: "$ "},                             // 0-2
		{t: sec(1), mark: "block 1: echo one"},               //
		{t: sec(1), out: "echo one\r\n"},                     // 2-12
		{t: sec(1.2), out: "\x1b[32mone\x1b[0m\r\n$ "},       // 12-28
		{t: sec(60), mark: "block 2: echo twö"},              //
		{t: sec(60), out: "echo twö\r\n"},                    // 28-39
		{t: sec(61), out: "twö 中文\x1b[6n\r\n$ "},             // 39-58 (with a cursor position query)
		{t: sec(100), out: "\x1b[2J\x1b[Hcleared\x1b[K\r\n"}, //
	}, []replay.IndexEntry{
		{N: 1, Command: "echo one", Start: 12, End: 26, T: 1, TEnd: 1.2},
		{N: 2, Command: "echo twö", Start: 39, End: 56, T: 60, TEnd: 61},
	})
}

func sec(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func TestReplayScreen(t *testing.T) {
	path, _ := shellRecording(t)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--at", "0s"}, ""},
		{[]string{"--at", "30s"}, "$ echo one\none\n$\n"},
		{[]string{"--at", "1m30s"}, "$ echo one\none\n$ echo twö\ntwö 中文\n$\n"},
		{[]string{"--from-block", "2"}, "$ echo one\none\n$ echo twö\n"},
		{[]string{"--from-block", "1"}, "$ echo one\n"},
		{nil, "cleared\n"},
		{[]string{"--at", "1h"}, "cleared\n"},
	}
	for _, tt := range tests {
		args := append([]string{"replay", "--screen", path}, tt.args...)
		out, errs, err := runArgs(t, args...)
		if err != nil || out != tt.want || errs != "" {
			t.Errorf("%q: printed %q (%q, %v), want %q", tt.args, out, errs, err, tt.want)
		}
	}
}

func TestReplayScreenResize(t *testing.T) {
	path, _ := writeRecording(t, 80, 24, []castStep{
		{t: sec(0.1), out: "wide\r\n"},
		{t: sec(0.2), cols: 10, rows: 3},
		{t: sec(0.3), out: "abcdefghijklmnop"},
	}, nil)
	out, _, err := runArgs(t, "replay", "--screen", path)
	if want := "wide\nabcdefghij\nklmnop\n"; err != nil || out != want {
		t.Errorf("printed %q (%v), want %q", out, err, want)
	}
}

func TestReplayPlay(t *testing.T) {
	path, all := shellRecording(t)
	for _, args := range [][]string{
		{"--speed", "1000"},
		{"--from-block", "2", "--speed", "1000"},
		{"--at", "90s", "--max-idle", "1ms"},
	} {
		out, errs, err := runArgs(t, append([]string{"replay", path}, args...)...)
		if err != nil || out != all || errs != "" {
			t.Errorf("%q: played %q (%q, %v), want the recording's output %q", args, out, errs, err, all)
		}
	}
	out, _, err := runArgs(t, "replay", "--resize", "--speed", "1000", "--max-idle", "1ms", writeResizeCast(t))
	if err != nil || out != "a\x1b[8;30;100tb" {
		t.Errorf("--resize played %q, %v", out, err)
	}
}

func writeResizeCast(t *testing.T) string {
	t.Helper()
	path, _ := writeRecording(t, 80, 24, []castStep{{t: 0, out: "a"}, {t: sec(1), cols: 100, rows: 30}, {t: sec(2), out: "b"}}, nil)
	return path
}

func TestReplayInterrupted(t *testing.T) {
	path, _ := writeRecording(t, 80, 24, []castStep{{t: 0, out: "\x1b[31mred"}, {t: time.Hour, out: "later"}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	var out, errb bytes.Buffer
	err := run(ctx, []string{"replay", "--max-idle", "-1s", path}, &out, &errb)
	if exitCode(err) != 130 || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("exit code %d, err %v; want 130, interrupted", exitCode(err), err)
	}
	if out.String() != "\x1b[31mred\x1b[0m\r\n" {
		t.Errorf("printed %q", out.String())
	}
}

func TestReplayBadInput(t *testing.T) {
	dir := t.TempDir()
	path, _ := shellRecording(t)
	noIndex := writeResizeCast(t)
	notCast := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notCast, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.cast")
	if err := os.WriteFile(huge, []byte(`{"version":2,"width":9000,"height":9000}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay"}, 2, "replay: want one recording FILE or session NODE/ID, got 0 arguments"},
		{[]string{"replay", "a", "b"}, 2, "got 2 arguments"},
		{[]string{"replay", "--speed", "0", path}, 2, "replay: --speed 0: want a positive number"},
		{[]string{"replay", "--speed", "-2", path}, 2, "want a positive number"},
		{[]string{"replay", "--at", "-1s", path}, 2, "replay: --at -1s: want a time into the recording"},
		{[]string{"replay", "--at", "soon", path}, 2, `invalid argument "soon" for "--at"`},
		{[]string{"replay", "--at", "1s", "--from-block", "1", path}, 2, "give --from-block or --at, not both"},
		{[]string{"replay", "--from-block", "0", path}, 2, "blocks are numbered from 1"},
		{[]string{"replay", filepath.Join(dir, "missing.cast")}, 1, "replay: open " + filepath.Join(dir, "missing.cast") + ": no such file or directory"},
		{[]string{"replay", dir}, 1, "is a directory"},
		{[]string{"replay", notCast}, 1, "replay: not an asciicast v3 or v2 recording: " + notCast + ": line 1: bad header"},
		{[]string{"replay", "--from-block", "7", path}, 1, "replay: no such block: 7 (the index of " + path + " has blocks 1 to 2)"},
		{[]string{"replay", "--from-block", "1", noIndex}, 1, "replay: no block index for " + noIndex + ": open " + replay.IndexPath(noIndex) + ": no such file or directory"},
		{[]string{"replay", "--screen", huge}, 1, "more than --screen emulates"},
	}
	for _, tt := range tests {
		out, errs, err := runArgs(t, tt.args...)
		if exitCode(err) != tt.code || err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: exit code %d, error %v; want %d and %q", tt.args, exitCode(err), err, tt.code, tt.want)
		}
		if out != "" || errs != "" {
			t.Errorf("%q: printed %q %q; errors are reported once, by main", tt.args, out, errs)
		}
	}
}

// TestReplaySession: `replay NODE/ID` fetches the session's recording through the
// controller and plays it, --from-block N starts at block N (the session's blocks),
// --screen prints its screen, and --export v2 writes asciicast v2 with the block's
// marker and exit code (what asciinema 2.2 reads: `asciinema cat` of it prints the output).
func TestReplaySession(t *testing.T) {
	needBash(t)
	addr := startDev(t)
	out, errs, err := runArgs(t, "new", "--addr", addr)
	if err != nil {
		t.Fatalf("new: %v %s", err, errs)
	}
	s := strings.TrimSpace(out)
	for _, cmd := range []string{"echo first-block", "echo second-block; (exit 3)"} {
		if _, errs, err := runArgs(t, "run", s, "--addr", addr, "--", cmd); err != nil && exitCode(err) != 3 {
			t.Fatalf("run %q: %v %s", cmd, err, errs)
		}
	}
	// The recorder writes on its own: wait until the recording has both blocks.
	var v3 string
	testutil.Eventually(t, 10*time.Second, func() bool {
		v3, _, err = runArgs(t, "replay", s, "--addr", addr, "--export", "v3")
		return err == nil && strings.Contains(v3, "second-block\\r\\n") && strings.Contains(v3, "exit 3\"]")
	}, "the recording holds the second block's output, the index its exit")
	if !strings.HasPrefix(v3, `{"version":3,"term":{"cols":`) || !strings.Contains(v3, `"m", "block 2: echo second-block; (exit 3) ⏎ exit 3"]`) {
		t.Errorf("v3 export:\n%s", v3)
	}
	out, errs, err = runArgs(t, "replay", s, "--addr", addr, "--speed", "1000", "--max-idle", "1ms")
	if err != nil || !strings.Contains(out, "first-block\r\n") || !strings.Contains(out, "second-block\r\n") {
		t.Errorf("replay %s: %v %s\n%q", s, err, errs, out)
	}
	out, errs, err = runArgs(t, "replay", s, "--addr", addr, "--from-block", "2", "--screen")
	if err != nil || !strings.Contains(out, "second-block") {
		t.Errorf("replay --from-block 2 --screen: %v %s\n%s", err, errs, out)
	}
	v2, errs, err := runArgs(t, "replay", s, "--addr", addr, "--export", "v2")
	if err != nil || !strings.HasPrefix(v2, `{"version":2,"width":`) {
		t.Fatalf("v2 export: %v %s\n%s", err, errs, v2)
	}
	if asc := testutil.WantTool(t, "asciinema"); asc != "" {
		p := filepath.Join(t.TempDir(), "s.cast")
		if err := os.WriteFile(p, []byte(v2), 0o600); err != nil {
			t.Fatal(err)
		}
		if cat := testutil.RunAsciinema(t, asc, "cat", p); !bytes.Contains(cat, []byte("second-block\r\n")) {
			t.Errorf("asciinema cat of the v2 export: %q", cat)
		}
	}
	// A closed session: its recording is still served, --from-block finds its blocks
	// by their markers.
	if _, errs, err := runArgs(t, "kill", s, "--addr", addr); err != nil {
		t.Fatalf("kill: %v %s", err, errs)
	}
	out, errs, err = runArgs(t, "replay", s, "--addr", addr, "--from-block", "2", "--screen")
	if err != nil || !strings.Contains(out, "second-block") {
		t.Errorf("replay --from-block 2 --screen of a closed session: %v %s\n%s", err, errs, out)
	}
	if _, _, err := runArgs(t, "replay", s, "--addr", addr, "--from-block", "9"); exitCode(err) != 1 {
		t.Errorf("--from-block 9: exit %d (%v), want 1", exitCode(err), err)
	}
	if _, _, err := runArgs(t, "replay", "here/s99", "--addr", addr); exitCode(err) != 1 {
		t.Errorf("replay of an unknown session: exit %d (%v), want 1", exitCode(err), err)
	}
	if _, _, err := runArgs(t, "replay", s, "--addr", addr, "--export", "v4"); exitCode(err) != 2 {
		t.Errorf("--export v4: exit %d, want 2", exitCode(err))
	}
}

// TestReplayV2File: a v2 recording (the format before v3) plays, and exports to v3 and
// back to v2 unchanged but for the exit code that the export adds to a marker from
// the block index.
func TestReplayV2File(t *testing.T) {
	const golden = "../../replay/testdata/golden.cast"
	v2, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	out, errs, err := runArgs(t, "replay", "--speed", "1000", "--max-idle", "1ms", golden)
	if err != nil || !strings.Contains(out, "caf\u00e9 \x1b[31mred") || !strings.HasSuffix(out, "earlierend\xe2\x82") {
		t.Errorf("replay of a v2 file: %v %s\n%q", err, errs, out)
	}
	v3, _, err := runArgs(t, "replay", "--export", "v3", golden)
	if err != nil || !strings.HasPrefix(v3, `{"version":3,"term":{"cols":80,"rows":24,`) {
		t.Fatalf("--export v3: %v\n%s", err, v3)
	}
	p := filepath.Join(t.TempDir(), "v3.cast")
	if err := os.WriteFile(p, []byte(v3), 0o600); err != nil {
		t.Fatal(err)
	}
	back, _, err := runArgs(t, "replay", "--export", "v2", p)
	want := strings.Replace(string(v2), `"block 1: ls"`, `"block 1: ls ⏎ exit 0"`, 1)
	if err != nil || back != want {
		t.Errorf("v2 → v3 → v2 (%v):\n%s\nwant\n%s", err, back, want)
	}
}
