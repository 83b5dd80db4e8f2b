package session

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// budgetFeed sends lines to a new textBudget of max bytes and returns its result.
func budgetFeed(max int, lines []string) (*textBudget, string, int64) {
	b := newTextBudget(max)
	for _, l := range lines {
		b.line([]byte(l))
	}
	text, omitted := b.result()
	return b, text, omitted
}

// budgetFull is the text a textBudget represents: lines joined, trailing empty lines dropped.
func budgetFull(lines []string) string {
	return strings.TrimRight(strings.Join(lines, "\n"), "\n")
}

// budgetCheck verifies the textBudget contract for lines and max, independently of the
// implementation, and returns head and tail.
func budgetCheck(t testing.TB, max int, lines []string) (head, tail string, omitted int64) {
	t.Helper()
	full := budgetFull(lines)
	_, text, omitted := budgetFeed(max, lines)
	if max <= 0 || len(full) <= max {
		if text != full || omitted != 0 {
			t.Fatalf("max %d, full %q: got %q, %d; want the whole text", max, full, text, omitted)
		}
		return full, "", 0
	}
	marker := fmt.Sprintf("\n[... %d bytes omitted ...]\n", omitted)
	kept := len(full) - int(omitted)
	if omitted <= 0 || len(text) != kept+len(marker) {
		t.Fatalf("max %d, full %d bytes: result %d bytes with %d omitted (%q)", max, len(full), len(text), omitted, text)
	}
	// Find the split: head is a prefix of full, tail a suffix, head+N+tail == full.
	half := max / 2
	found := false
	for h := 0; h <= min(half, kept); h++ {
		if text[h:h+len(marker)] == marker && text[:h] == full[:h] && text[h+len(marker):] == full[len(full)-(kept-h):] {
			head, tail, found = full[:h], full[len(full)-(kept-h):], true
			break
		}
	}
	if !found {
		t.Fatalf("max %d: result %q is not head+marker+tail of %q", max, text, full)
	}
	if len(head) > half || len(tail) > half {
		t.Fatalf("max %d: head %d bytes, tail %d bytes; want at most %d", max, len(head), len(tail), half)
	}
	// Cut at line boundaries when the first (last) line fits, else at a rune boundary with as
	// many bytes as possible.
	first, _, _ := strings.Cut(full, "\n")
	if len(first) <= half {
		if full[len(head)] != '\n' {
			t.Fatalf("head %q does not end at a line boundary", head)
		}
		if rest := full[len(head)+1:]; strings.Contains(rest, "\n") {
			if next := len(head) + 1 + strings.IndexByte(rest, '\n'); next <= half {
				t.Fatalf("head %q could hold more whole lines", head)
			}
		}
	} else if !utf8.ValidString(head) || half-len(head) >= utf8.UTFMax {
		t.Fatalf("head %q (%d bytes) is not a rune-boundary cut at %d", head, len(head), half)
	}
	last := full[strings.LastIndexByte(full, '\n')+1:]
	start := len(full) - len(tail)
	if len(last) <= half {
		if full[start-1] != '\n' {
			t.Fatalf("tail %q does not start at a line boundary", tail)
		}
		if prev := strings.LastIndexByte(full[:start-1], '\n'); prev >= 0 && len(full)-(prev+1) <= half {
			t.Fatalf("tail %q could hold more whole lines", tail)
		}
	} else if !utf8.ValidString(tail) || half-len(tail) >= utf8.UTFMax {
		t.Fatalf("tail %q (%d bytes) is not a rune-boundary cut at %d", tail, len(tail), half)
	}
	return head, tail, omitted
}

func TestTextBudget(t *testing.T) {
	tests := []struct {
		name       string
		max        int
		lines      []string
		head, tail string
	}{
		{name: "unlimited", max: 0, lines: []string{"a", "b", "c"}, head: "a\nb\nc"},
		{name: "negative unlimited", max: -5, lines: []string{"abc"}, head: "abc"},
		{name: "empty", max: 10, lines: nil, head: ""},
		{name: "only empty lines", max: 1, lines: []string{"", "", ""}, head: ""},
		{name: "fits exactly", max: 5, lines: []string{"ab", "cd"}, head: "ab\ncd"},
		{name: "trailing empty lines not counted", max: 5, lines: []string{"ab", "cd", "", ""}, head: "ab\ncd"},
		{name: "leading and inner empty lines", max: 0, lines: []string{"", "a", "", "b", ""}, head: "\na\n\nb"},
		{name: "one byte over", max: 4, lines: []string{"ab", "cd"}, head: "ab", tail: "cd"},
		{name: "line cutting", max: 12, lines: []string{"aa", "bb", "cc", "dd", "ee", "ff"}, head: "aa\nbb", tail: "ee\nff"},
		{name: "line cutting uneven", max: 10, lines: []string{"a", "bbb", "c", "dddddd", "e", "ff"}, head: "a\nbbb", tail: "e\nff"},
		{name: "first line too long", max: 10, lines: []string{"abcdefgh", "x", "y", "zz"}, head: "abcde", tail: "y\nzz"},
		{name: "last line too long", max: 10, lines: []string{"a", "b", "c", "uvwxyz12"}, head: "a\nb\nc", tail: "xyz12"},
		{name: "empty first line fits", max: 8, lines: []string{"", "abcdefghij"}, head: "", tail: "ghij"},
		{name: "huge line multibyte", max: 11, lines: []string{strings.Repeat("日", 10)}, head: "日", tail: "日"},
		{name: "huge line 4-byte runes", max: 14, lines: []string{strings.Repeat("😀", 10)}, head: "😀", tail: "😀"},
		{name: "max 1", max: 1, lines: []string{"ab"}, head: "", tail: ""},
		{name: "max 2", max: 2, lines: []string{"a", "b", "c"}, head: "a", tail: "c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			head, tail, _ := budgetCheck(t, tc.max, tc.lines)
			if head != tc.head || tail != tc.tail {
				t.Fatalf("got head %q tail %q; want %q %q", head, tail, tc.head, tc.tail)
			}
		})
	}
}

func TestTextBudgetFormat(t *testing.T) {
	_, text, omitted := budgetFeed(10, []string{"aaaa", "bbbb", "cccc", "dddd"})
	if want := "aaaa\n[... 11 bytes omitted ...]\ndddd"; text != want || omitted != 11 {
		t.Fatalf("got %q, %d; want %q, 11", text, omitted, want)
	}
}

func TestTextBudgetResultRepeatable(t *testing.T) {
	b := newTextBudget(10)
	for i := range 5 {
		b.line([]byte(fmt.Sprint("line", i)))
		t1, n1 := b.result()
		t2, n2 := b.result()
		if t1 != t2 || n1 != n2 {
			t.Fatalf("result changed: %q,%d then %q,%d", t1, n1, t2, n2)
		}
	}
	b.line([]byte("last"))
	if text, n := b.result(); text != "line0\n[... 25 bytes omitted ...]\nlast" || n != 25 {
		t.Fatalf("got %q, %d", text, n)
	}
}

func TestTextBudgetBoundedMemory(t *testing.T) {
	const max = 1000
	b := newTextBudget(max)
	line := []byte(strings.Repeat("x", 77))
	var total int64
	for i := 0; total < 20<<20; i++ {
		b.line(line[:i%len(line)])
		if cap(b.head)+cap(b.tail) > 2*max+16 {
			t.Fatalf("after %d bytes: head cap %d, tail cap %d", total, cap(b.head), cap(b.tail))
		}
		total += int64(i%len(line)) + 1
	}
	b.line(make([]byte, 10<<20)) // a single huge line
	if cap(b.head)+cap(b.tail) > 2*max+16 {
		t.Fatalf("after a huge line: head cap %d, tail cap %d", cap(b.head), cap(b.tail))
	}
	text, omitted := b.result()
	if len(text) > max+40 || omitted < 30<<20-2*max {
		t.Fatalf("got %d bytes, %d omitted", len(text), omitted)
	}
}

func TestRenderText(t *testing.T) {
	text, omitted := renderText(0, 0, []byte("a\r\n\x1b[31mb"), []byte("\x1b[0m\n\n\n"))
	if text != "a\nb" || omitted != 0 {
		t.Fatalf("got %q, %d", text, omitted)
	}
	var in []byte
	for i := range 1000 {
		in = fmt.Appendf(in, "\x1b[1mline %03d\x1b[0m\r\n", i)
	}
	text, omitted = renderText(24, 40, in, []byte("\x1b[?1049hhidden\x1b[?1049l"))
	want := "line 000\nline 001\n[... 8965 bytes omitted ...]\nline 998\nline 999"
	if text != want || omitted != 8965 {
		t.Fatalf("got %q, %d; want %q", text, omitted, want)
	}
}

func FuzzTextBudget(f *testing.F) {
	f.Add([]byte("aa\nbb\ncc\ndd\nee\nff"), int16(12))
	f.Add([]byte("abcdefgh\nx\ny\nzz\n\n"), int16(10))
	f.Add([]byte(strings.Repeat("日", 10)), int16(11))
	f.Add([]byte("\n\nx\n\n"), int16(3))
	f.Add([]byte("a\nb\nc"), int16(0))
	f.Fuzz(func(t *testing.T, data []byte, max int16) {
		if !utf8.Valid(data) {
			data = []byte(strings.ToValidUTF8(string(data), "\uFFFD"))
		}
		lines := strings.Split(string(data), "\n")
		budgetCheck(t, int(max), lines)
	})
}
