package session

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// renderCollect is a lineSink that records lines and checks the lineSink contract.
type renderCollect struct {
	t     testing.TB
	lines []string
}

func (c *renderCollect) line(l []byte) {
	if !utf8.Valid(l) {
		c.t.Errorf("line is not valid UTF-8: %q", l)
	}
	if bytes.IndexByte(l, '\n') >= 0 {
		c.t.Errorf("line contains a newline: %q", l)
	}
	if len(l) > 0 && l[len(l)-1] == ' ' {
		c.t.Errorf("line has a trailing space: %q", l)
	}
	c.lines = append(c.lines, string(l))
}

// renderChunks renders the chunks in a window of rows lines and returns the emitted lines.
func renderChunks(t testing.TB, rows int, chunks ...[]byte) []string {
	c := &renderCollect{t: t}
	r := newTextRenderer(rows, c)
	for _, ch := range chunks {
		if n, err := r.Write(ch); n != len(ch) || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(ch))
		}
	}
	r.Close()
	return c.lines
}

func renderJoin(t testing.TB, rows int, chunks ...[]byte) string {
	return strings.Join(renderChunks(t, rows, chunks...), "\n")
}

func TestTextRenderer(t *testing.T) {
	var progress strings.Builder
	for i := 0; i <= 100; i++ {
		fmt.Fprintf(&progress, "\rprogress %d%%", i)
	}
	progress.WriteString("\n")

	tests := []struct {
		name, in, want string
		rows           int
	}{
		{name: "plain", in: "hello\nworld\n", want: "hello\nworld"},
		{name: "no trailing newline", in: "hello\nworld", want: "hello\nworld"},
		{name: "empty", in: "", want: ""},
		{name: "only newlines", in: "\n\n\n", want: ""},
		{name: "inner empty lines", in: "\na\n\n\nb\n\n", want: "\na\n\n\nb"},
		{name: "crlf", in: "a\r\nb\r\n", want: "a\nb"},
		{name: "vt ff", in: "a\vb\fc", want: "a\nb\nc"},
		{name: "progress", in: progress.String(), want: "progress 100%"},
		{name: "cr overwrite", in: "10%\r20%\r100%\n", want: "100%"},
		{name: "cr partial", in: "abcdef\rxy", want: "xycdef"},
		{name: "trailing spaces", in: "abc   \n  \n", want: "abc"},
		{name: "blank line of spaces", in: "a\n \nb\x1b[5C\n", want: "a\n\nb"},
		{name: "backspace", in: "abc\b\bX", want: "aXc"},
		{name: "backspace floor", in: "ab\b\b\bc", want: "cb"},
		{name: "tab", in: "a\tb", want: "a       b"},
		{name: "tab boundary", in: "12345678\tx", want: "12345678        x"},
		{name: "tab keeps text", in: "abcdefghij\r\tX", want: "abcdefghXj"},
		{name: "bel and controls", in: "a\x07b\x00c\x0ed\x0fe\x7f", want: "abcde"},
		{name: "csi K after cr", in: "long line here\rshort\x1b[K\n", want: "short"},
		{name: "csi K1", in: "abcdef\x1b[3G\x1b[1K", want: "   def"},
		{name: "csi K2", in: "abcdef\x1b[2Kx", want: "      x"},
		{name: "multi-line progress", in: "a 1\nb 1\n\x1b[2A\x1b[2Ka 2\n\x1b[2Kb 2\n", want: "a 2\nb 2"},
		{name: "clear", in: "old\n\x1b[H\x1b[2J\x1b[3Jnew\n", want: "new"},
		{name: "sgr", in: "\x1b[1;31mred\x1b[0m plain\x1b[38;2;1;2;3mX\x1b[m\x1b[38:5:200mY", want: "red plainXY"},
		{name: "osc title bel", in: "\x1b]0;my title\x07hello", want: "hello"},
		{name: "osc title st", in: "a\x1b]2;t\x1b\\ b", want: "a b"},
		{name: "osc 133", in: "\x1b]133;A\x07$ ls\x1b]133;B\x07\n\x1b]133;C\x07file\n\x1b]133;D;0\x07", want: "$ ls\nfile"},
		{name: "osc 8 link", in: "\x1b]8;;http://x/\x1b\\link\x1b]8;;\x1b\\", want: "link"},
		{name: "osc with utf8 and newline", in: "\x1b]0;日本\nx\x07ok", want: "ok"},
		{name: "osc aborted by esc", in: "\x1b]0;title\x1b[31mred", want: "red"},
		{name: "osc aborted by can", in: "\x1b]0;title\x18ok", want: "ok"},
		{name: "dcs", in: "a\x1bPq#0;2;0;0;0#0~~@@\x1b\\b", want: "ab"},
		{name: "apc pm sos", in: "\x1b_Gf=100;AAAA\x1b\\x\x1b^pm\x1b\\y\x1bXsos\x07z", want: "xyz"},
		{name: "alt screen 1049", in: "before\n\x1b[?1049h\x1b[H\x1b[2Jvim stuff\nmore\x1b[?1049lafter\n", want: "before\nafter"},
		{name: "alt screen 47", in: "x\x1b[?47hhidden\x1b[?47l\n", want: "x"},
		{name: "alt screen 1047 multi param", in: "x\x1b[?25;1047hhidden\x1b[?1047;25l", want: "x"},
		{name: "alt screen scrolls", rows: 3, in: "a\n\x1b[?1049h1\n2\n3\n4\n5\n6\n\x1b[?1049lb", want: "a\nb"},
		{name: "alt screen not closed", in: "a\n\x1b[?1049hhidden", want: "a"},
		{name: "alt screen twice", in: "a\x1b[?1049hx\x1b[?1049hy\x1b[?1049l\x1b[?1049lb", want: "ab"},
		{name: "utf8", in: "héllo wörld ✓ 日本語\n", want: "héllo wörld ✓ 日本語"},
		{name: "utf8 overwrite", in: "日本語\rab", want: "ab語"},
		{name: "utf8 emoji", in: "😀x\b\by", want: "yx"},
		{name: "invalid utf8", in: "a\xffb\xe6\x97c\xc0\x80d\xed\xa0\x80e", want: "a\ufffdb\ufffd\ufffdc\ufffd\ufffdd\ufffd\ufffd\ufffde"},
		{name: "invalid utf8 before esc", in: "a\xe6\x1b[31mb", want: "a\ufffdb"},
		{name: "truncated utf8 at end", in: "a\xe6\x97", want: "a\ufffd\ufffd"},
		{name: "c1 rune ignored", in: "a\u009bb\u0085c", want: "abc"},
		{name: "cup", in: "\x1b[3;5HX", want: "\n\n    X"},
		{name: "cup f default", in: "abc\n\x1b[fX", want: "Xbc"},
		{name: "cup clamp", in: "\x1b[1000;3HX", rows: 3, want: "\n\n  X"},
		{name: "cha", in: "abcdef\x1b[3GX", want: "abXdef"},
		{name: "hpa", in: "abcdef\x1b[3`X", want: "abXdef"},
		{name: "huge column clamped", in: "\x1b[99999999999999999999GX\rY", want: "Y" + strings.Repeat(" ", renderMaxCols-2) + "X"},
		{name: "param overflow saturates", in: "\x1b[18446744073709551617GX\rY", want: "Y" + strings.Repeat(" ", renderMaxCols-2) + "X"},
		{name: "cuf", in: "\x1b[5Cx", want: "     x"},
		{name: "cub", in: "abcdef\x1b[2DX\x1b[99DY", want: "YbcdXf"},
		{name: "cuu clamp", in: "\x1b[99Aabc", want: "abc"},
		{name: "cud", in: "a\x1b[2Bb", want: "a\n\n b"},
		{name: "cnl cpl", in: "a\nb\x1b[Fx\x1b[2Ey", want: "x\nb\ny"},
		{name: "vpa", in: "\x1b[3dX", want: "\n\nX"},
		{name: "cht clamp", in: "\x1b[99999IX\rY\t\tZ", want: "Y               Z" + strings.Repeat(" ", renderMaxCols-18) + "X"},
		{name: "cht cbt", in: "a\x1b[2Ib\x1b[2Zc", want: "a       c       b"},
		{name: "ed0", in: "abc\ndef\nghi\x1b[2;2H\x1b[J", want: "abc\nd"},
		{name: "ed1", in: "abc\ndef\nghi\x1b[2;2H\x1b[1J", want: "\n  f\nghi"},
		{name: "ed2 keeps cursor", in: "abc\ndef\x1b[2Jx", want: "\n   x"},
		{name: "ech", in: "abcdef\r\x1b[2X", want: "  cdef"},
		{name: "ech past end", in: "abcdef\x1b[3G\x1b[9X", want: "ab"},
		{name: "dch", in: "abcdef\r\x1b[2P", want: "cdef"},
		{name: "dch past end", in: "abcdef\x1b[5G\x1b[9P", want: "abcd"},
		{name: "ich", in: "abcdef\r\x1b[2@", want: "  abcdef"},
		{name: "ich mid", in: "abcdef\x1b[3G\x1b[@X", want: "abXcdef"},
		{name: "il", in: "a\nb\nc\x1b[2;1H\x1b[L", want: "a\n\nb\nc"},
		{name: "il drops bottom", rows: 3, in: "a\nb\nc\x1b[1;1H\x1b[2L", want: "\n\na"},
		{name: "il clamp", rows: 3, in: "a\nb\nc\x1b[2;1H\x1b[9L", want: "a"},
		{name: "dl clamp", rows: 3, in: "a\nb\nc\x1b[2;1H\x1b[9M", want: "a"},
		{name: "dl", in: "a\nb\nc\x1b[2;1H\x1b[M", want: "a\nc"},
		{name: "su", rows: 3, in: "a\nb\nc\x1b[Sd", want: "a\nb\nc\n d"},
		{name: "sd", rows: 3, in: "a\nb\x1b[Tx", want: "\nax\nb"},
		{name: "save restore esc", in: "abc\x1b7\ndef\x1b8X", want: "abcX\ndef"},
		{name: "save restore csi", in: "abc\x1b[s\ndef\x1b[uX", want: "abcX\ndef"},
		{name: "restore without save", in: "abc\ndef\x1b8X", want: "Xbc\ndef"},
		{name: "reverse index at top", rows: 3, in: "a\x1bMb", want: " b\na"},
		{name: "reverse index", in: "a\nb\x1bMc", want: "ac\nb"},
		{name: "index", in: "ab\x1bDc", want: "ab\n  c"},
		{name: "next line", in: "ab\x1bEc", want: "ab\nc"},
		{name: "reset", in: "abc\ndef\x1bcxyz", want: "xyz"},
		{name: "reset in alt", in: "abc\x1b[?1049hhidden\x1bcxyz", want: "xyz"},
		{name: "charset", in: "\x1b(Babc\x1b)0\x1b#8\x1b%G\x1b=\x1b>", want: "abc"},
		{name: "csi intermediate", in: "\x1b[2 qabc\x1b[!p", want: "abc"},
		{name: "csi private", in: "\x1b[?25labc\x1b[?25h\x1b[>4;1m\x1b[?2J", want: "abc"},
		{name: "esc in csi", in: "\x1b[12\x1b[2Kabc", want: "abc"},
		{name: "can in csi", in: "\x1b[12\x18abc", want: "abc"},
		{name: "control in csi", in: "ab\x1b[\r1Cx", want: "ax"},
		{name: "control in esc", in: "ab\x1b\r[1Cx", want: "ax"},
		{name: "utf8 in csi", in: "\x1b[1é", want: "é"},
		{name: "st alone", in: "a\x1b\\b", want: "ab"},
		{name: "many params", in: "\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18;19;20;1049habc", want: "abc"},
		{name: "scroll emits", rows: 2, in: "1\n2\n3\n4", want: "1\n2\n3\n4"},
		{name: "rows 1", rows: 1, in: "1\n2\x1b[A\x1b[5B3", want: "1\n23"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			got := renderJoin(t, tc.rows, in)
			if got != tc.want {
				t.Fatalf("render(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			// Any split into two writes, and one byte per write, give the same output.
			for k := 0; k <= len(in); k++ {
				if s := renderJoin(t, tc.rows, in[:k], in[k:]); s != got {
					t.Fatalf("split at %d: got %q want %q", k, s, got)
				}
			}
			var bytewise [][]byte
			for i := range in {
				bytewise = append(bytewise, in[i:i+1])
			}
			if s := renderJoin(t, tc.rows, bytewise...); s != got {
				t.Fatalf("byte by byte: got %q want %q", s, got)
			}
		})
	}
}

func TestTextRendererUTF8Splits(t *testing.T) {
	in := []byte("héllo wörld ✓ 日本語 😀\n\xf0\x9f\x98x")
	want := "héllo wörld ✓ 日本語 😀\n\ufffd\ufffd\ufffdx"
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			if got := renderJoin(t, 0, in[:i], in[i:j], in[j:]); got != want {
				t.Fatalf("split %d,%d: got %q want %q", i, j, got, want)
			}
		}
	}
}

func TestTextRendererScrollEmitsInOrder(t *testing.T) {
	c := &renderCollect{t: t}
	r := newTextRenderer(3, c)
	for i := range 10 {
		fmt.Fprintf(r, "line %d\n", i)
		// After k newlines in a 3-row window, k-2 lines have scrolled off.
		if want := max(i+1-2, 0); len(c.lines) != want {
			t.Fatalf("after %d lines: %d emitted, want %d", i+1, len(c.lines), want)
		}
	}
	r.Write([]byte("tail"))
	r.Close()
	want := []string{}
	for i := range 10 {
		want = append(want, fmt.Sprintf("line %d", i))
	}
	want = append(want, "tail")
	if strings.Join(c.lines, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q\nwant %q", c.lines, want)
	}
	// A second Close emits nothing; the renderer is reusable.
	r.Close()
	r.Write([]byte("again"))
	r.Close()
	if last := c.lines[len(c.lines)-1]; len(c.lines) != len(want)+1 || last != "again" {
		t.Fatalf("after reuse: %q", c.lines)
	}
}

func TestTextRendererLongLineWraps(t *testing.T) {
	in := strings.Repeat("a", renderMaxCols+10) + "\n" + strings.Repeat("é", renderMaxCols) + "b"
	lines := renderChunks(t, 0, []byte(in))
	want := []string{strings.Repeat("a", renderMaxCols), strings.Repeat("a", 10), strings.Repeat("é", renderMaxCols), "b"}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d", len(lines), len(want))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Fatalf("line %d: got %d bytes, want %d", i, len(lines[i]), len(want[i]))
		}
	}
}

// renderCounter checks that streamed lines arrive in order with the expected content, without
// allocating.
type renderCounter struct {
	t    testing.TB
	n    int
	want []byte
}

func (c *renderCounter) line(l []byte) {
	c.want = append(strconv.AppendInt(append(c.want[:0], "line "...), int64(c.n), 10), " ✓ done"...)
	if !bytes.Equal(l, c.want) {
		c.t.Fatalf("line %d: got %q want %q", c.n, l, c.want)
	}
	c.n++
}

func TestTextRendererLargeStreamBoundedMemory(t *testing.T) {
	const total = 10 << 20
	c := &renderCounter{t: t, want: make([]byte, 0, 64)}
	r := newTextRenderer(24, c)
	written, want := 0, 0
	buf := make([]byte, 0, 128<<10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for written < total {
		// Every line exercises colours, a progress rewrite, UTF-8 and erase-line.
		buf = buf[:0]
		for range 1000 {
			buf = append(buf, "\x1b[32mline "...)
			buf = strconv.AppendInt(buf, int64(want), 10)
			buf = append(buf, "\x1b[0m ✓ 50%\x1b[3D\x1b[Kdone\r\n"...)
			want++
		}
		// Feed it in odd-sized pieces.
		for p := buf; len(p) > 0; {
			n := min(len(p), 4093)
			r.Write(p[:n])
			p = p[n:]
		}
		written += len(buf)
	}
	r.Close()
	runtime.ReadMemStats(&after)
	if c.n != want {
		t.Fatalf("got %d lines, want %d", c.n, want)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Fatalf("rendering %d MB allocated %d bytes; want bounded memory", written>>20, alloc)
	}
	t.Logf("%d bytes, %d lines, %d bytes allocated", written, want, after.TotalAlloc-before.TotalAlloc)
}

// renderFirst keeps the first lines it receives and counts the others.
type renderFirst struct {
	first []string
	n     int
}

func (c *renderFirst) line(l []byte) {
	if len(c.first) < 2 {
		c.first = append(c.first, string(l))
	}
	c.n++
}

func TestTextRendererHostileInputBounded(t *testing.T) {
	// An unterminated OSC, a huge CSI and a huge line without newline must not grow memory.
	c := &renderFirst{}
	r := newTextRenderer(4, c)
	r.Write([]byte("start\n\x1b]0;"))
	junk := bytes.Repeat([]byte("x"), 1<<20)
	for range 8 {
		r.Write(junk)
	}
	r.Write([]byte("\x07\x1b["))
	digits := bytes.Repeat([]byte("9;"), 1<<19)
	r.Write(digits)
	r.Write([]byte("mend\n"))
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap := ms.HeapAlloc
	for range 8 {
		r.Write(junk) // 8 MiB line: wrapped at renderMaxCols
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	// At most the 4-row window of full-width lines plus the emit buffer stay live.
	if limit := heap + 5*renderMaxCols*utf8.UTFMax + 1<<20; ms.HeapAlloc > limit {
		t.Fatalf("heap grew from %d to %d", heap, ms.HeapAlloc)
	}
	r.Close()
	if c.n != 2+8<<20/renderMaxCols {
		t.Fatalf("got %d lines", c.n)
	}
	if c.first[0] != "start" || c.first[1] != "end" {
		t.Fatalf("got %q", c.first)
	}
}

func renderFuzzSeeds() []string {
	return []string{
		"hello\nworld\n",
		"10%\r20%\r100%\n",
		"a 1\nb 1\n\x1b[2A\x1b[2Ka 2\n\x1b[2Kb 2\n",
		"old\n\x1b[H\x1b[2J\x1b[3Jnew\n",
		"\x1b[1;31mred\x1b[0m\x1b]0;title\x07\x1b]133;A\x1b\\x",
		"before\n\x1b[?1049h\x1b[Hvim\x1b[?1049lafter",
		"héllo wörld ✓ 日本語 \xff\xe6\x97",
		"\x1bPq#0~~\x1b\\\x1b_x\x07\x1bXy\x1b\\",
		"abc\x1b7\n\x1b8\x1b[2P\x1b[3@\x1b[L\x1b[M\x1b[S\x1b[T\x1bM\x1bD\x1bE\x1bc",
		"a\tb\bc\x1b[5;5H\x1b[1J\x1b[1K\x1b[3X\x1b[99G\x1b[99d",
		"\x1b[12\x1b[3Ax\x18\x1b(B\x1b[2 q",
	}
}

func FuzzTextRenderer(f *testing.F) {
	for i, s := range renderFuzzSeeds() {
		f.Add([]byte(s), uint16(len(s)/2), uint8(i%4))
	}
	f.Fuzz(func(t *testing.T, data []byte, split uint16, rows uint8) {
		nrows := int(rows%6) + 1
		whole := renderChunks(t, nrows, data) // renderCollect checks the sink contract
		k := int(split) % (len(data) + 1)
		parts := renderChunks(t, nrows, data[:k], data[k:])
		if strings.Join(whole, "\n") != strings.Join(parts, "\n") || len(whole) != len(parts) {
			t.Fatalf("split at %d differs:\n whole %q\n split %q", k, whole, parts)
		}
		// Empty lines may scroll off before Close, but the budget drops trailing ones.
		text, omitted := renderText(nrows, 0, data[:k], data[k:])
		if want := strings.TrimRight(strings.Join(whole, "\n"), "\n"); text != want || omitted != 0 {
			t.Fatalf("renderText = %q, %d; want %q, 0", text, omitted, want)
		}
	})
}

// renderBenchInput returns about n bytes of mixed terminal output: plain lines, coloured lines,
// UTF-8, progress rewrites and erase sequences.
func renderBenchInput(n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		switch i % 8 {
		case 0, 1, 2, 3:
			b = fmt.Appendf(b, "%06d some ordinary log output of a build step, path/to/file.go:123: ok\n", i)
		case 4:
			b = fmt.Appendf(b, "\x1b[1;32m%06d PASS\x1b[0m TestSomething (0.01s) \x1b[2m[cached]\x1b[0m\n", i)
		case 5:
			b = fmt.Appendf(b, "%06d héllo wörld ✓ 日本語 — unicode line\n", i)
		case 6:
			b = fmt.Appendf(b, "\r 10%% [##        ]\r 50%% [#####     ]\r100%% [##########]\x1b[K\n")
		case 7:
			b = fmt.Appendf(b, "\x1b]0;title %d\x07\x1b[2K\rdownloading\tlayer %d\n", i, i)
		}
	}
	return b
}

type renderDiscard struct{ n int }

func (d *renderDiscard) line(l []byte) { d.n += len(l) }

func renderBenchmark(b *testing.B, in []byte) {
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		r := newTextRenderer(24, &renderDiscard{})
		for p := in; len(p) > 0; {
			n := min(len(p), 32<<10)
			r.Write(p[:n])
			p = p[n:]
		}
		r.Close()
	}
}

func BenchmarkTextRenderer(b *testing.B) {
	renderBenchmark(b, renderBenchInput(10<<20))
}

func BenchmarkTextRendererASCII(b *testing.B) {
	var in []byte
	for i := 0; len(in) < 10<<20; i++ {
		in = fmt.Appendf(in, "%06d some ordinary log output of a build step, path/to/file.go:123: ok\n", i)
	}
	renderBenchmark(b, in)
}

func TestRenderPrintableRun(t *testing.T) {
	naive := func(p []byte) int {
		i := 0
		for i < len(p) && p[i] >= 0x20 && p[i] < 0x7f {
			i++
		}
		return i
	}
	buf := []byte(strings.Repeat("abcdefgh", 4))
	for pos := range buf {
		for c := range 256 {
			p := bytes.Clone(buf)
			p[pos] = byte(c)
			for _, q := range [][]byte{p, p[1:], p[pos:], p[:pos+1]} {
				if got, want := renderPrintableRun(q), naive(q); got != want {
					t.Fatalf("byte %#x at %d in %q: got %d want %d", c, pos, q, got, want)
				}
			}
		}
	}
}
