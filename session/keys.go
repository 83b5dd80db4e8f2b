package session

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrBadKey is matched (errors.Is) by every error for an unknown or
// malformed key name returned by KeyBytes and KeysBytes.
var ErrBadKey = errors.New("session: bad key")

// KeyError says which key name was bad and why. It wraps ErrBadKey.
//
// Name is the offending name exactly as given (it may be long or invalid
// UTF-8); Reason is a short human-readable explanation. Error appends a hint
// listing the valid forms, so the message alone is enough for a caller (or
// an AI agent) to correct the name.
type KeyError struct {
	Name   string
	Reason string
}

// keyMaxName is the longest key name, in bytes, that KeyBytes accepts.
const keyMaxName = 32

// keyHint is appended to every KeyError message.
const keyHint = "valid keys: Enter, Tab, BTab, Esc, Space, BSpace, Up/Down/Left/Right, " +
	"Home, End, Insert, Delete, PgUp, PgDn, F1-F12, C-x, M-<key>, " +
	"S-/C-/M- with arrows, navigation and F-keys, or one printable character"

// Error returns e.g.
//
//	session: bad key "C-foo": C- takes ...; valid keys: Enter, Tab, ...
//
// Names longer than 32 bytes are shown truncated.
func (e *KeyError) Error() string {
	name := e.Name
	cut := false
	if len(name) > keyMaxName {
		n := keyMaxName
		for i := 0; i < utf8.UTFMax && n > 0 && !utf8.RuneStart(name[n]); i++ {
			n--
		}
		if n == 0 {
			n = keyMaxName
		}
		name, cut = name[:n], true
	}
	q := strconv.Quote(name)
	if cut {
		q += "... (" + strconv.Itoa(len(e.Name)) + " bytes)"
	}
	return "session: bad key " + q + ": " + e.Reason + "; " + keyHint
}

// Unwrap returns ErrBadKey.
func (e *KeyError) Unwrap() error { return ErrBadKey }

// keyKind says how a named key reacts to modifiers.
type keyKind uint8

const (
	keyKindFixed keyKind = iota // fixed bytes; only M- (ESC prefix) allowed
	keyKindTab                  // S- turns it into BTab; M- prefixes ESC
	keyKindSpace                // C- gives NUL; M- prefixes ESC
	keyKindCSI                  // ESC [ F, modified ESC [ 1 ; m F
	keyKindSS3                  // ESC O F, modified ESC [ 1 ; m F
	keyKindTilde                // ESC [ n ~, modified ESC [ n ; m ~
)

type keyDef struct {
	name    string   // canonical name
	aliases []string // other accepted names
	kind    keyKind
	seq     string // unmodified bytes
	final   byte   // final byte for keyKindCSI and keyKindSS3
	num     int    // parameter for keyKindTilde
}

func keyCSI(name string, final byte) keyDef {
	return keyDef{name: name, kind: keyKindCSI, seq: "\x1b[" + string(final), final: final}
}

func keySS3(name string, final byte) keyDef {
	return keyDef{name: name, kind: keyKindSS3, seq: "\x1bO" + string(final), final: final}
}

func keyTilde(name string, num int, aliases ...string) keyDef {
	return keyDef{name: name, aliases: aliases, kind: keyKindTilde,
		seq: "\x1b[" + strconv.Itoa(num) + "~", num: num}
}

// keyDefs is the table of named keys (xterm, normal cursor-key mode).
var keyDefs = []keyDef{
	{name: "Enter", aliases: []string{"Return"}, kind: keyKindFixed, seq: "\r"},
	{name: "Tab", kind: keyKindTab, seq: "\t"},
	{name: "BTab", kind: keyKindFixed, seq: "\x1b[Z"},
	{name: "Esc", aliases: []string{"Escape"}, kind: keyKindFixed, seq: "\x1b"},
	{name: "Space", kind: keyKindSpace, seq: " "},
	{name: "BSpace", aliases: []string{"Backspace"}, kind: keyKindFixed, seq: "\x7f"},
	keyCSI("Up", 'A'),
	keyCSI("Down", 'B'),
	keyCSI("Right", 'C'),
	keyCSI("Left", 'D'),
	keyCSI("Home", 'H'),
	keyCSI("End", 'F'),
	keyTilde("Insert", 2, "IC"),
	keyTilde("Delete", 3, "Del", "DC"),
	keyTilde("PgUp", 5, "PageUp", "PPage"),
	keyTilde("PgDn", 6, "PageDown", "NPage"),
	keySS3("F1", 'P'),
	keySS3("F2", 'Q'),
	keySS3("F3", 'R'),
	keySS3("F4", 'S'),
	keyTilde("F5", 15),
	keyTilde("F6", 17),
	keyTilde("F7", 18),
	keyTilde("F8", 19),
	keyTilde("F9", 20),
	keyTilde("F10", 21),
	keyTilde("F11", 23),
	keyTilde("F12", 24),
}

// keyByName maps ASCII-lowercased names and aliases to their definition.
var keyByName = func() map[string]*keyDef {
	m := make(map[string]*keyDef, 2*len(keyDefs))
	for i := range keyDefs {
		d := &keyDefs[i]
		for _, n := range append([]string{d.name}, d.aliases...) {
			l := keyLowerASCII(n)
			if _, dup := m[l]; dup {
				panic("session: duplicate key name " + n)
			}
			m[l] = d
		}
	}
	return m
}()

// keyLowerASCII lowercases ASCII letters only, so that no Unicode case
// folding (e.g. U+017F LONG S → s) can make a non-ASCII name match.
func keyLowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// keyMods is the set of modifier prefixes on a key name.
type keyMods struct{ ctrl, meta, shift bool }

// keyIsModPrefix reports whether s starts with a modifier prefix
// ("C-", "M-", "S-", either case).
func keyIsModPrefix(s string) bool {
	if len(s) < 2 || s[1] != '-' {
		return false
	}
	switch s[0] {
	case 'C', 'c', 'M', 'm', 'S', 's':
		return true
	}
	return false
}

// keySplit strips modifier prefixes from name and returns them with the
// remaining base key. A prefix is only stripped when something follows it,
// so "C-" and "M--" split as base "C-" and (meta, "-"). reason is non-empty
// if a modifier is repeated.
func keySplit(name string) (mods keyMods, base, reason string) {
	base = name
	for len(base) > 2 && keyIsModPrefix(base) {
		var p *bool
		switch base[0] {
		case 'C', 'c':
			p = &mods.ctrl
		case 'M', 'm':
			p = &mods.meta
		default:
			p = &mods.shift
		}
		if *p {
			return mods, base, "modifier " + strings.ToUpper(base[:2]) + " given twice"
		}
		*p = true
		base = base[2:]
	}
	return mods, base, ""
}

// keyCtrl returns the byte for C-<r>, if any.
func keyCtrl(r rune) (byte, bool) {
	switch {
	case 'a' <= r && r <= 'z':
		return byte(r-'a') + 1, true
	case 'A' <= r && r <= 'Z':
		return byte(r-'A') + 1, true
	}
	switch r {
	case '@', '2':
		return 0x00, true
	case '[':
		return 0x1b, true
	case '\\':
		return 0x1c, true
	case ']':
		return 0x1d, true
	case '^', '6':
		return 0x1e, true
	case '_', '/':
		return 0x1f, true
	case '?':
		return 0x7f, true
	}
	return 0, false
}

const keyReasonCtrl = "C- takes a letter, one of @ [ \\ ] ^ _ ? / 2 6, Space, " +
	"or an arrow, Home, End, Insert, Delete, PgUp, PgDn or F-key"

// keyParse does the work of KeyBytes. On failure it returns a non-empty
// reason and nil bytes.
func keyParse(name string) ([]byte, string) {
	switch {
	case name == "":
		return nil, "empty key name"
	case len(name) > keyMaxName:
		return nil, "key name longer than " + strconv.Itoa(keyMaxName) + " bytes"
	case !utf8.ValidString(name):
		return nil, "key name is not valid UTF-8"
	case strings.TrimSpace(name) == "":
		return nil, "whitespace-only key name; use Space, Tab or Enter"
	}
	mods, base, reason := keySplit(name)
	if reason != "" {
		return nil, reason
	}
	if r, size := utf8.DecodeRuneInString(base); size == len(base) {
		return keyParseRune(mods, r, base)
	}
	d := keyByName[keyLowerASCII(base)]
	if d == nil {
		return nil, keyUnknownReason(mods, base)
	}
	m := 1
	if mods.shift {
		m++
	}
	if mods.meta {
		m += 2
	}
	if mods.ctrl {
		m += 4
	}
	var out []byte
	switch d.kind {
	case keyKindCSI, keyKindSS3:
		if m == 1 {
			return []byte(d.seq), ""
		}
		out = append(out, "\x1b[1;"...)
		out = strconv.AppendInt(out, int64(m), 10)
		return append(out, d.final), ""
	case keyKindTilde:
		if m == 1 {
			return []byte(d.seq), ""
		}
		out = append(out, "\x1b["...)
		out = strconv.AppendInt(out, int64(d.num), 10)
		out = append(out, ';')
		out = strconv.AppendInt(out, int64(m), 10)
		return append(out, '~'), ""
	case keyKindTab:
		if mods.ctrl {
			return nil, "Tab accepts only the S- and M- modifiers"
		}
		out = []byte(d.seq)
		if mods.shift {
			out = []byte("\x1b[Z")
		}
	case keyKindSpace:
		if mods.shift {
			return nil, "Space accepts only the C- and M- modifiers"
		}
		out = []byte(d.seq)
		if mods.ctrl {
			out = []byte{0}
		}
	default: // keyKindFixed
		if mods.ctrl || mods.shift {
			return nil, d.name + " accepts only the M- modifier"
		}
		out = []byte(d.seq)
	}
	if mods.meta {
		out = append([]byte{0x1b}, out...)
	}
	return out, ""
}

// keyParseRune handles a base that is a single character.
func keyParseRune(mods keyMods, r rune, base string) ([]byte, string) {
	if mods.shift {
		return nil, "S- cannot modify a single character; type the shifted character itself " +
			"(S- works with Tab, arrows, Home, End, Insert, Delete, PgUp, PgDn and F-keys)"
	}
	var out []byte
	if mods.meta {
		out = append(out, 0x1b)
	}
	if mods.ctrl {
		c, ok := keyCtrl(r)
		if !ok {
			return nil, keyReasonCtrl
		}
		return append(out, c), ""
	}
	switch {
	case unicode.IsSpace(r):
		return nil, "whitespace character; use Space, Tab or Enter"
	case !unicode.IsPrint(r):
		return nil, "control or non-printable character; use a named key such as Enter, Tab or Esc, or C-x"
	}
	return append(out, base...), ""
}

// keyUnknownReason explains why a multi-character base is not a key.
func keyUnknownReason(mods keyMods, base string) string {
	if len(base) == 2 && keyIsModPrefix(base) {
		return "modifier " + strings.ToUpper(base) + " has no key after it"
	}
	l := keyLowerASCII(base)
	for _, p := range []string{"ctrl", "control", "alt", "meta", "shift", "cmd", "super", "opt"} {
		if strings.HasPrefix(l, p+"-") || strings.HasPrefix(l, p+"+") {
			return "unknown modifier; write modifiers as C-, M- or S- (e.g. C-c, M-x, S-Up)"
		}
	}
	if len(base) == 2 && base[0] == '^' {
		return "caret notation is not accepted; write control keys as C-x"
	}
	if mods.ctrl {
		return keyReasonCtrl
	}
	return "unknown key name"
}

// KeyBytes returns the bytes a terminal (xterm, normal cursor-key mode) sends
// for one named key. The result is a fresh, non-empty slice of at most 16
// bytes that the caller may modify.
//
// Accepted names (named keys and modifier prefixes are ASCII
// case-insensitive; "enter", "ENTER" and "c-a" are fine):
//
//   - Enter (Return) "\r", Tab "\t", BTab (S-Tab) "\x1b[Z", Esc (Escape)
//     "\x1b", Space " ", BSpace (Backspace) "\x7f".
//   - Up, Down, Right, Left "\x1b[A".."\x1b[D", Home "\x1b[H", End "\x1b[F",
//     Insert (IC) "\x1b[2~", Delete (Del, DC) "\x1b[3~", PgUp (PageUp, PPage)
//     "\x1b[5~", PgDn (PageDown, NPage) "\x1b[6~".
//   - F1-F4 "\x1bOP".."\x1bOS", F5-F12 "\x1b[15~", 17, 18, 19, 20, 21, 23, 24.
//   - C-x: x a letter (either case) gives 0x01-0x1a; C-@, C-Space, C-2 give
//     0x00; C-[ 0x1b; C-\ 0x1c; C-] 0x1d; C-^, C-6 0x1e; C-_, C-/ 0x1f;
//     C-? 0x7f.
//   - M-<key>: ESC followed by the bytes of <key>, e.g. M-x, M-Enter, M-C-a
//     (modifiers may come in any order, each at most once).
//   - Arrows, Home, End, Insert, Delete, PgUp, PgDn and F1-F12 take any of
//     S-, M-, C- as an xterm modifier parameter m = 1 + 1(S) + 2(M) + 4(C):
//     S-Up "\x1b[1;2A", C-Delete "\x1b[3;5~", C-F1 "\x1b[1;5P",
//     M-F5 "\x1b[15;3~". For these keys M- does not prefix ESC.
//   - Any other single printable, non-space character is sent as its UTF-8
//     bytes ("a", ";", "é"). Single characters are case-sensitive.
//
// Anything else — empty or whitespace-only names, unknown names ("foo",
// "F13", "Ctrl-c"), a modifier with no key ("C-", "M-"), a modifier that does
// not apply (S-a, C-Enter, C-é), a repeated modifier, names longer than 32
// bytes and invalid UTF-8 — yields a *KeyError wrapping ErrBadKey, with Name
// set to name, and nil bytes.
func KeyBytes(name string) ([]byte, error) {
	b, reason := keyParse(name)
	if reason != "" {
		return nil, &KeyError{Name: name, Reason: reason}
	}
	return b, nil
}

// KeysBytes concatenates KeyBytes for each name, in order. On the first bad
// name it returns that name's *KeyError and nil bytes, never a partial
// result. On success the result is non-nil (zero-length for no names).
func KeysBytes(names []string) ([]byte, error) {
	out := make([]byte, 0, 4*len(names))
	for _, n := range names {
		b, err := KeyBytes(n)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// KeyNames lists the canonical names of the named keys (for help text and
// docs), sorted in byte order. It returns a fresh slice. Aliases (Return,
// Escape, Backspace, IC, Del, DC, PageUp, PPage, PageDown, NPage), modifier
// forms (C-x, M-x, S-Up, ...) and single characters are accepted by KeyBytes
// but not listed.
func KeyNames() []string {
	names := make([]string, 0, len(keyDefs))
	for _, d := range keyDefs {
		names = append(names, d.name)
	}
	slices.Sort(names)
	return names
}
