package agent

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text renders an agent's raw terminal output as plain lines for a reader (a model
// or a person catching up): escape sequences are dropped, a cursor move to
// another row or a carriage return not followed by a line feed starts a new
// line, blank lines are dropped, a line repeated or extended by the next (a TUI
// redrawing its footer, a prompt being typed) is kept once, as it was last,
// control characters never pass. It is a plain reading of the bytes, not a
// terminal: a TUI that redraws in place shows each version of a line it drew.
// Within max bytes (≤ 0: no limit) it keeps the head and the tail and says how
// many bytes it left out between them; omitted is that count.
func Text(raw []byte, max int) (text string, omitted int64) {
	var lines []string
	var cur strings.Builder
	flush := func() {
		l := strings.TrimRightFunc(cur.String(), unicode.IsSpace)
		cur.Reset()
		if strings.TrimSpace(l) == "" {
			return
		}
		if n := len(lines); n > 0 && strings.HasPrefix(l, lines[n-1]) {
			lines[n-1] = l // the same line again, or more of it (typed, redrawn)
			return
		}
		lines = append(lines, l)
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == 0x1b:
			i = skipEscape(raw, i, flush, func(n int, abs bool) {
				if abs { // to column n: the gap up to it (a move back: one space)
					n -= 1 + utf8.RuneCountInString(cur.String())
				}
				if n < 1 {
					n = 1
				}
				cur.WriteString(strings.Repeat(" ", n))
			})
			continue
		case c == '\n':
			flush()
		case c == '\r':
			if i+1 < len(raw) && raw[i+1] == '\n' {
				break
			}
			flush()
		case c == '\t':
			cur.WriteByte(' ')
		case c < 0x20 || c == 0x7f:
			// other controls: dropped
		case c < utf8.RuneSelf:
			cur.WriteByte(c)
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r != utf8.RuneError && (unicode.IsPrint(r) || r == ' ') && !(r >= 0x80 && r < 0xa0) {
				cur.WriteRune(r)
			}
			i += size
			continue
		}
		i++
	}
	flush()
	text = strings.Join(lines, "\n")
	if max <= 0 || len(text) <= max {
		return text, 0
	}
	head := cutRunes(text, max/2)
	tailStart := len(text) - (max - len(head))
	for tailStart < len(text) && !utf8.RuneStart(text[tailStart]) {
		tailStart++
	}
	omitted = int64(tailStart - len(head))
	return head + "\n[… " + strconv.FormatInt(omitted, 10) + " bytes omitted …]\n" + text[tailStart:], omitted
}

// skipEscape skips the escape sequence at raw[i] (ESC) and returns the index after
// it; a cursor move to another row ends the line (flush), a move on the row is a
// gap of spaces (TUIs such as Claude Code's draw spaces so): n columns forward,
// or up to column n (abs).
func skipEscape(raw []byte, i int, flush func(), gap func(n int, abs bool)) int {
	if i+1 >= len(raw) {
		return len(raw)
	}
	switch raw[i+1] {
	case '[': // CSI: parameters, intermediates, a final byte 0x40–0x7e
		j := i + 2
		for j < len(raw) && (raw[j] < 0x40 || raw[j] > 0x7e) {
			j++
		}
		if j < len(raw) {
			switch raw[j] {
			case 'H', 'f', 'A', 'B', 'E', 'F', 'd', 'J':
				flush()
			case 'C', 'G', '`': // forward n, to column n: a gap
				n, err := strconv.Atoi(string(raw[i+2 : j]))
				if err != nil || n < 1 {
					n = 1
				}
				gap(min(n, 256), raw[j] != 'C')
			}
			return j + 1
		}
		return len(raw)
	case ']', 'P', '_', '^', 'X': // strings up to BEL or ST
		for j := i + 2; j < len(raw); j++ {
			if raw[j] == 0x07 {
				return j + 1
			}
			if raw[j] == 0x1b && j+1 < len(raw) && raw[j+1] == '\\' {
				return j + 2
			}
		}
		return len(raw)
	case '(', ')', '*', '+', '#', '%':
		return min(i+3, len(raw))
	}
	return i + 2
}

// cutRunes returns s's prefix of at most n bytes, on a rune boundary.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
