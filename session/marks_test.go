package session

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const testNonce = "0123456789abcdef0123456789abcdef"

// scanAll runs the scanner over the pieces and returns the output and marks.
func scanAll(nonce string, pieces ...[]byte) ([]byte, []mark, []int) {
	m := newMarkScanner(nonce)
	var out []byte
	var marks []mark
	var at []int
	for _, p := range pieces {
		m.scan(p, func(b []byte) { out = append(out, b...) }, func(mk mark) {
			marks = append(marks, mk)
			at = append(at, len(out))
		})
	}
	m.flush(func(b []byte) { out = append(out, b...) })
	return out, marks, at
}

func TestMarkScanner(t *testing.T) {
	n := testNonce
	cases := []struct {
		name  string
		in    string
		out   string
		marks []mark
		at    []int
	}{
		{"plain", "hello\r\nworld", "hello\r\nworld", nil, nil},
		{"prompt and input", "\x1b]133;fm=" + n + ";A\a$ \x1b]133;fm=" + n + ";B\a", "$ ",
			[]mark{{kind: markPrompt}, {kind: markInput}}, []int{0, 2}},
		{"block", "\x1b]133;fm=" + n + ";C\ahi\r\n\x1b]133;fm=" + n + ";D;130\a", "hi\r\n",
			[]mark{{kind: markOutput}, {kind: markDone, exit: 130, hasExit: true}}, []int{0, 4}},
		{"ST terminator", "x\x1b]133;fm=" + n + ";D;0\x1b\\y", "xy", []mark{{kind: markDone, hasExit: true}}, []int{1}},
		{"cwd", "\x1b]7;fm=" + n + ";file://host/tmp/a b;c\a", "", []mark{{kind: markCwd, cwd: "/tmp/a b;c"}}, []int{0}},
		{"no nonce is output", "\x1b]133;D;0\a", "\x1b]133;D;0\a", nil, nil},
		{"wrong nonce is output", "\x1b]133;fm=" + n[:31] + "0;D;0\a", "\x1b]133;fm=" + n[:31] + "0;D;0\a", nil, nil},
		{"short nonce is output", "\x1b]133;fm=0123;D;0\a", "\x1b]133;fm=0123;D;0\a", nil, nil},
		{"nonce prefix is dropped, not acted on", "\x1b]133;fm=" + n + "00;D;0\a!", "!", nil, nil},
		{"nonce without a kind is dropped", "\x1b]133;fm=" + n + "\a!", "!", nil, nil},
		{"bad exit code", "\x1b]133;fm=" + n + ";D;abc\a", "", []mark{{kind: markDone}}, []int{0}},
		{"nothing ran", "\x1b]133;fm=" + n + ";N;2\a$", "$", []mark{{kind: markNoRun, exit: 2, hasExit: true}}, []int{0}},
		{"re-prompt", "\x1b]133;fm=" + n + ";R;17\a", "", []mark{{kind: markReprompt, exit: 17, hasExit: true}}, []int{0}},
		{"re-prompt without a number is dropped", "\x1b]133;fm=" + n + ";R;x\a!", "!", nil, nil},
		{"forged N is output", "\x1b]133;N;0\a", "\x1b]133;N;0\a", nil, nil},
		{"unknown kind is dropped", "\x1b]133;fm=" + n + ";Z\a!", "!", nil, nil},
		{"other escapes untouched", "\x1b[31mred\x1b[0m\x1b]0;title\a", "\x1b[31mred\x1b[0m\x1b]0;title\a", nil, nil},
		{"unterminated at end is flushed", "\x1b]133;fm=" + n[:31] + "0;C", "\x1b]133;fm=" + n[:31] + "0;C", nil, nil},
		{"unterminated mark at end is dropped", "x\x1b]133;fm=" + n + ";C", "x", nil, nil},
		{"unterminated nonce at end is dropped", "x\x1b]7;fm=" + n, "x", nil, nil},
		{"ESC inside candidate", "\x1b]133;fm=" + n[:31] + "0;C\x1b[0m\a", "\x1b]133;fm=" + n[:31] + "0;C\x1b[0m\a", nil, nil},
		{"ESC inside mark drops it", "\x1b]133;fm=" + n + ";C\x1b[0m\a", "\x1b[0m\a", nil, nil},
		{"raw cwd with a mark of its own", "a\x1b]7;fm=" + n + ";file://h/tmp/x\x1b]133;A\a\ab", "a\x1b]133;A\a\ab", nil, nil},
		{"raw cwd with ESC at the mark's end", "\x1b]7;fm=" + n + ";file://h/x\x1b\x1b]133;fm=" + n + ";A\a", "\x1b", []mark{{kind: markPrompt}}, []int{1}},
		{"raw cwd with ST", "\x1b]7;fm=" + n + ";file://h/x\x1b\\tail\a", "tail\a", []mark{{kind: markCwd, cwd: "/x"}}, []int{0}},
		{"cwd percent-encoded", "\x1b]7;fm=" + n + ";file://h%2Fx/tmp/a%1B]133;A%07%25b%C2%9C%20\a", "", []mark{{kind: markCwd, cwd: "/tmp/a\x1b]133;A\a%b\u009c "}}, []int{0}},
		{"cwd that does not decode is literal", "\x1b]7;fm=" + n + ";file://h/a%zz%4\a", "", []mark{{kind: markCwd, cwd: "/a%zz%4"}}, []int{0}},
		{"cwd without a path is dropped", "\x1b]7;fm=" + n + ";file://h\a!", "!", nil, nil},
		{"lone ESC", "a\x1bb", "a\x1bb", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.in)
			// Every split into two reads (and one byte at a time) gives the same result.
			splits := [][][]byte{{in}}
			for i := 1; i < len(in); i++ {
				splits = append(splits, [][]byte{in[:i], in[i:]})
			}
			var bytewise [][]byte
			for i := range in {
				bytewise = append(bytewise, in[i:i+1])
			}
			splits = append(splits, bytewise)
			for _, pieces := range splits {
				out, marks, at := scanAll(n, pieces...)
				if string(out) != c.out || !reflect.DeepEqual(marks, c.marks) || !reflect.DeepEqual(at, c.at) {
					t.Fatalf("pieces %q:\n out %q marks %+v at %v\nwant %q marks %+v at %v", pieces, out, marks, at, c.out, c.marks, c.at)
				}
			}
		})
	}
}

func TestMarkScannerModes(t *testing.T) {
	in := []byte("x\x1b[?2004hy\x1b[?1049hz\x1b[?1049l\x1b[?47h\x1b[?2004l")
	want := []mark{
		{kind: markMode, mode: 2004, on: true}, {kind: markMode, mode: 1049, on: true},
		{kind: markMode, mode: 1049}, {kind: markMode, mode: 47, on: true}, {kind: markMode, mode: 2004},
	}
	for i := 1; i < len(in); i++ {
		out, marks, at := scanAll(testNonce, in[:i], in[i:])
		if string(out) != string(in) || !reflect.DeepEqual(marks, want) || !reflect.DeepEqual(at, []int{1, 10, 19, 27, 33}) {
			t.Fatalf("split %d: out %q marks %+v at %v", i, out, marks, at)
		}
	}
	// Without integration (no nonce) modes are still tracked and nothing is removed.
	m := newMarkScanner("")
	m.osc133, m.osc7 = nil, nil
	var out []byte
	var n int
	m.scan([]byte("\x1b]133;;D;0\a\x1b[?1049h"), func(b []byte) { out = append(out, b...) }, func(mark) { n++ })
	if string(out) != "\x1b]133;;D;0\a\x1b[?1049h" || n != 1 {
		t.Fatalf("no integration: %q, %d marks", out, n)
	}
}

func TestMarkScannerLongCandidate(t *testing.T) {
	// A candidate that never terminates is released as output once it is too long.
	in := append([]byte("\x1b]133;fm="+testNonce[:31]+"0;"), bytes.Repeat([]byte("x"), maxMarkLen+10)...)
	out, marks, _ := scanAll(testNonce, in[:100], in[100:])
	if !bytes.Equal(out, in) || len(marks) != 0 {
		t.Fatalf("long candidate: %d bytes out (want %d), %d marks", len(out), len(in), len(marks))
	}
	// A mark with the nonce that is too long is dropped through its terminator (BEL,
	// ST, or up to another ESC), however it is split; what follows is scanned.
	for _, tail := range []string{"\a", "\x1b\\", ""} {
		long := "\x1b]7;fm=" + testNonce + ";file://h/" + strings.Repeat("d", maxMarkLen) + tail
		in := []byte("a" + long + "b\x1b]133;fm=" + testNonce + ";A\ac\x1b[0m")
		wantOut := "abc\x1b[0m"
		if tail == "" { // no terminator: the next ESC ends it
			wantOut = "ac\x1b[0m"
		}
		for _, k := range []int{1, 50, maxMarkLen, len(long), len(long) + 1, len(long) + 2} {
			out, marks, at := scanAll(testNonce, in[:k], in[k:])
			if string(out) != wantOut || !reflect.DeepEqual(marks, []mark{{kind: markPrompt}}) || !reflect.DeepEqual(at, []int{strings.IndexByte(wantOut, 'c')}) {
				t.Fatalf("tail %q split %d: out %q marks %+v at %v; want %q and the A mark", tail, k, out, marks, at, wantOut)
			}
		}
	}
}

// FuzzMarkScannerNonce: a mark's prefix with the nonce, followed by anything (a valid
// mark, a malformed one: an ESC inside, a raw cwd with its own marks, too long, cut off
// at the end of the stream), between any bytes without the nonce, split anywhere: no
// byte of the nonce ever reaches the output. (The nonce's first byte is taken out of
// the bytes around it, so the output may hold none of it.)
func FuzzMarkScannerNonce(f *testing.F) {
	n := testNonce
	for _, s := range []string{
		"A\a", ";D;0\a", "file://h/tmp/x\x1b]133;A\a\a", "file://h/x\x1b\\", "C\x1b[0m\a", ";C", "",
		"file://h/a%zz\a", ";D;0\x1b", strings.Repeat("x", maxMarkLen+3) + "\a",
	} {
		f.Add([]byte("x"), false, []byte(s), []byte("\x1b]133;A\aout"), 7)
	}
	f.Fuzz(func(t *testing.T, before []byte, osc7 bool, body, after []byte, split int) {
		clean := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte{n[0]}, []byte("x")) }
		prefix := "\x1b]133;fm=" + n
		if osc7 {
			prefix = "\x1b]7;fm=" + n
		}
		in := append(append(append(clean(before), prefix...), clean(body)...), clean(after)...)
		if split < 0 {
			split = -split
		}
		split %= len(in) + 1
		for _, pieces := range [][][]byte{{in}, {in[:split], in[split:]}} {
			out, _, _ := scanAll(n, pieces...)
			if bytes.IndexByte(out, n[0]) >= 0 {
				t.Fatalf("the nonce reached the output: in %q, out %q", in, out)
			}
		}
	})
}

func FuzzMarkScanner(f *testing.F) {
	n := testNonce
	for _, s := range []string{
		"hello", "\x1b]133;fm=" + n + ";A\a", "\x1b]133;fm=" + n + ";D;1\x1b\\",
		"\x1b]7;fm=" + n + ";file://h/x\a", "\x1b]133;D;0\a", "\x1b[?2004h", "\x1b]133;fm=" + n,
	} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, in []byte, split int) {
		whole, marks, at := scanAll(n, in)
		if split < 0 {
			split = -split
		}
		split %= len(in) + 1
		out2, marks2, at2 := scanAll(n, in[:split], in[split:])
		if !bytes.Equal(whole, out2) || !reflect.DeepEqual(marks, marks2) || !reflect.DeepEqual(at, at2) {
			t.Fatalf("split at %d changes the result: %q/%v vs %q/%v", split, whole, marks, out2, marks2)
		}
		if len(whole) > len(in) {
			t.Fatalf("output longer than input")
		}
		// Without the nonce nothing is removed and no program can produce a mark (mode
		// reports are not marks of the shell).
		if !bytes.Contains(in, []byte(n)) {
			if !bytes.Equal(whole, in) {
				t.Fatalf("input without the nonce was altered: %q -> %q", in, whole)
			}
			for _, mk := range marks {
				if mk.kind != markMode {
					t.Fatalf("input without the nonce produced a %c mark: %q", mk.kind, in)
				}
			}
		}
		// What remains never holds a complete nonce-bearing mark.
		for _, prefix := range []string{"\x1b]133;fm=" + n + ";", "\x1b]7;fm=" + n + ";"} {
			if i := bytes.Index(whole, []byte(prefix)); i >= 0 {
				rest := whole[i+len(prefix):]
				if j := bytes.IndexAny(rest, "\a\x1b"); j >= 0 && rest[j] == '\a' && j < maxMarkLen {
					t.Fatalf("a valid mark survived in the output: %q", whole)
				}
			}
		}
		_ = fmt.Sprint(marks)
	})
}
