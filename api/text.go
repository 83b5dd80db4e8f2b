package api

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Free text that people give sessions (titles, descriptions, label values) ends up
// in other people's terminals: `fleetmux ls`, the SSH menu. A terminal obeys the
// control sequences in what it prints (ESC[2J clears it, OSC 52 writes the
// clipboard, bidi overrides reorder the line), so such text is checked on the way
// in (ValidText) and made harmless on the way out (Printable).

// ErrBadText is matched (errors.Is) by every error about free text with a control
// character or invalid UTF-8.
var ErrBadText = errors.New("api: bad text")

// control reports whether r must never reach a terminal as it is: C0 controls,
// DEL, C1 controls, and the bidirectional controls that reorder what follows
// (U+200E, U+200F, U+202A–U+202E, U+2066–U+2069).
func control(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// Printable returns s safe to print to a terminal: every control character (see
// above, newlines and tabs included) is written as a visible escape (\x1b,
// \u009b, \u202e), as is every byte that is not UTF-8 (\xff). Text without them
// comes back unchanged. It is the one function every front end (the CLI's tables,
// the SSH menu, audit records of untrusted names) prints free text through.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || control(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && control(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case control(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// ValidText checks free text named what (e.g. "title"): valid UTF-8 without
// control characters; multiline text (a description) may also hold newlines and
// tabs. The error wraps ErrBadText and says which character, where.
func ValidText(what, s string, multiline bool) error {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return fmt.Errorf("%w: %s: byte 0x%02x at position %d is not UTF-8", ErrBadText, what, s[i], i+1)
			}
		}
		if !control(r) || multiline && (r == '\n' || r == '\t') {
			continue
		}
		return fmt.Errorf("%w: %s: control character %U at position %d is not allowed (titles, descriptions and labels are plain text)", ErrBadText, what, r, i+1)
	}
	return nil
}

// ValidLabels checks a session's or a node's labels: at most MaxLabels, keys that
// are names (ValidName), values of plain text (ValidText) up to MaxLabelValueBytes.
func ValidLabels(l map[string]string) error {
	if len(l) > MaxLabels {
		return fmt.Errorf("%d labels (limit %d)", len(l), MaxLabels)
	}
	for k, v := range l {
		if err := ValidName(k); err != nil {
			return fmt.Errorf("label key: %w", err)
		}
		if len(v) > MaxLabelValueBytes {
			return fmt.Errorf("label %s: value over %d bytes", k, MaxLabelValueBytes)
		}
		if err := ValidText("label "+k, v, false); err != nil {
			return err
		}
	}
	return nil
}

// Clip cuts s to at most n runes (n ≥ 1); a cut ends in "…".
func Clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// OneLine is the first line of s (without the blank space around s), marked " …"
// when more text follows, cut to n runes with Clip: a title or a command in a table
// row.
func OneLine(s string, n int) string {
	first, rest, more := strings.Cut(strings.TrimSpace(s), "\n")
	first = strings.TrimRight(first, "\r ")
	if more && strings.TrimSpace(rest) != "" {
		first += " …"
	}
	return Clip(first, n)
}

// FirstLine is the first line of s that is not blank, with tabs and carriage returns
// as spaces and trimmed (the summary of a command's output); more reports that lines
// follow it.
func FirstLine(s string) (line string, more bool) {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		l = strings.TrimSpace(strings.Map(func(r rune) rune {
			if r == '\t' || r == '\r' {
				return ' '
			}
			return r
		}, l))
		if l != "" {
			return l, i < len(lines)-1
		}
	}
	return "", false
}
