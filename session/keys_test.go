package session

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var keyTestCases = []struct {
	name string
	want string
}{
	// Basic named keys and aliases, several spellings.
	{"Enter", "\r"}, {"enter", "\r"}, {"ENTER", "\r"}, {"Return", "\r"}, {"return", "\r"},
	{"Tab", "\t"}, {"tab", "\t"},
	{"BTab", "\x1b[Z"}, {"btab", "\x1b[Z"}, {"S-Tab", "\x1b[Z"}, {"s-tab", "\x1b[Z"},
	{"Esc", "\x1b"}, {"ESC", "\x1b"}, {"Escape", "\x1b"}, {"escape", "\x1b"},
	{"Space", " "}, {"space", " "},
	{"BSpace", "\x7f"}, {"bspace", "\x7f"}, {"Backspace", "\x7f"}, {"BACKSPACE", "\x7f"},
	{"Up", "\x1b[A"}, {"up", "\x1b[A"}, {"Down", "\x1b[B"}, {"Right", "\x1b[C"}, {"Left", "\x1b[D"},
	{"Home", "\x1b[H"}, {"End", "\x1b[F"},
	{"Insert", "\x1b[2~"}, {"IC", "\x1b[2~"}, {"ic", "\x1b[2~"},
	{"Delete", "\x1b[3~"}, {"Del", "\x1b[3~"}, {"DC", "\x1b[3~"}, {"dc", "\x1b[3~"},
	{"PgUp", "\x1b[5~"}, {"PageUp", "\x1b[5~"}, {"PPage", "\x1b[5~"}, {"pgup", "\x1b[5~"},
	{"PgDn", "\x1b[6~"}, {"PageDown", "\x1b[6~"}, {"NPage", "\x1b[6~"}, {"PGDN", "\x1b[6~"},

	// Function keys.
	{"F1", "\x1bOP"}, {"F2", "\x1bOQ"}, {"F3", "\x1bOR"}, {"F4", "\x1bOS"}, {"f1", "\x1bOP"},
	{"F5", "\x1b[15~"}, {"F6", "\x1b[17~"}, {"F7", "\x1b[18~"}, {"F8", "\x1b[19~"},
	{"F9", "\x1b[20~"}, {"F10", "\x1b[21~"}, {"F11", "\x1b[23~"}, {"F12", "\x1b[24~"}, {"f12", "\x1b[24~"},

	// Control keys.
	{"C-a", "\x01"}, {"C-A", "\x01"}, {"c-a", "\x01"}, {"C-b", "\x02"}, {"C-c", "\x03"},
	{"C-d", "\x04"}, {"C-h", "\x08"}, {"C-i", "\x09"}, {"C-j", "\x0a"}, {"C-m", "\x0d"},
	{"C-M", "\x0d"}, {"C-z", "\x1a"}, {"C-Z", "\x1a"},
	{"C-@", "\x00"}, {"C-Space", "\x00"}, {"c-space", "\x00"}, {"C-2", "\x00"},
	{"C-[", "\x1b"}, {"C-\\", "\x1c"}, {"C-]", "\x1d"},
	{"C-^", "\x1e"}, {"C-6", "\x1e"}, {"C-_", "\x1f"}, {"C-/", "\x1f"}, {"C-?", "\x7f"},

	// Meta (ESC prefix).
	{"M-x", "\x1bx"}, {"M-X", "\x1bX"}, {"m-x", "\x1bx"}, {"M-Enter", "\x1b\r"},
	{"M-Tab", "\x1b\t"}, {"M-BTab", "\x1b\x1b[Z"}, {"M-S-Tab", "\x1b\x1b[Z"}, {"S-M-Tab", "\x1b\x1b[Z"},
	{"M-Esc", "\x1b\x1b"}, {"M-Space", "\x1b "}, {"M-BSpace", "\x1b\x7f"},
	{"M-C-a", "\x1b\x01"}, {"C-M-a", "\x1b\x01"}, {"c-m-a", "\x1b\x01"}, {"M-C-Space", "\x1b\x00"},
	{"M--", "\x1b-"}, {"M-é", "\x1b\xc3\xa9"}, {"M-;", "\x1b;"},

	// Modified cursor / navigation keys.
	{"S-Up", "\x1b[1;2A"}, {"M-Up", "\x1b[1;3A"}, {"S-M-Up", "\x1b[1;4A"}, {"C-Up", "\x1b[1;5A"},
	{"C-S-Up", "\x1b[1;6A"}, {"S-C-Up", "\x1b[1;6A"}, {"C-M-Up", "\x1b[1;7A"}, {"C-M-S-Up", "\x1b[1;8A"},
	{"C-Left", "\x1b[1;5D"}, {"M-Right", "\x1b[1;3C"}, {"S-Down", "\x1b[1;2B"},
	{"C-Home", "\x1b[1;5H"}, {"S-End", "\x1b[1;2F"},
	{"C-Delete", "\x1b[3;5~"}, {"c-del", "\x1b[3;5~"}, {"S-Insert", "\x1b[2;2~"},
	{"M-PgUp", "\x1b[5;3~"}, {"C-S-M-PgDn", "\x1b[6;8~"},

	// Modified function keys.
	{"C-F1", "\x1b[1;5P"}, {"S-F2", "\x1b[1;2Q"}, {"M-F3", "\x1b[1;3R"}, {"C-S-F4", "\x1b[1;6S"},
	{"C-F5", "\x1b[15;5~"}, {"S-F12", "\x1b[24;2~"}, {"M-F10", "\x1b[21;3~"}, {"C-M-S-F11", "\x1b[23;8~"},

	// Single characters are themselves (case-sensitive).
	{"a", "a"}, {"A", "A"}, {"z", "z"}, {"0", "0"}, {";", ";"}, {"-", "-"}, {"~", "~"},
	{"C", "C"}, {"M", "M"}, {"S", "S"}, {"é", "\xc3\xa9"}, {"世", "世"}, {"😀", "😀"},
}

func TestKeyBytes(t *testing.T) {
	for _, tc := range keyTestCases {
		got, err := KeyBytes(tc.name)
		if err != nil {
			t.Errorf("KeyBytes(%q): unexpected error: %v", tc.name, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("KeyBytes(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestKeyBytesFreshSlice(t *testing.T) {
	a, _ := KeyBytes("Up")
	a[0] = 'X'
	b, _ := KeyBytes("Up")
	if string(b) != "\x1b[A" {
		t.Fatalf("KeyBytes result shares storage: got %q after mutation", b)
	}
}

var keyBadNames = []string{
	"", " ", "  ", "\t", "\n", " \t\r\n", "\u3000",
	"foo", "Enterx", " Enter", "Enter ", "C-", "M-", "S-", "C-M-", "C-ab", "C-foo", "C-é",
	"C-1", "C-3", "C--", "C- ", "M- ", "C-Enter", "S-Enter", "C-Tab", "S-Space", "S-a", "S-A",
	"C-BTab", "S-BTab", "C-Esc", "S-Esc", "C-C-a", "M-M-x", "S-S-Up", "c-C-a",
	"F13", "F0", "F01", "F1F", "Ctrl-c", "ctrl+c", "Alt-x", "Shift-Up", "^C",
	"\x00", "\x01", "\x7f", "\x1b", "\u200b", "\xff", "a\xff", "\xc3",
	"BſPACE", "Eɴter",
	strings.Repeat("a", 33), "C-" + strings.Repeat("x", 40), strings.Repeat("é", 20),
}

func TestKeyBytesErrors(t *testing.T) {
	for _, name := range keyBadNames {
		got, err := KeyBytes(name)
		if err == nil {
			t.Errorf("KeyBytes(%q) = %q, want error", name, got)
			continue
		}
		if got != nil {
			t.Errorf("KeyBytes(%q) returned bytes %q with error", name, got)
		}
		if !errors.Is(err, ErrBadKey) {
			t.Errorf("KeyBytes(%q): error %v does not match ErrBadKey", name, err)
		}
		var ke *KeyError
		if !errors.As(err, &ke) {
			t.Errorf("KeyBytes(%q): error %T is not *KeyError", name, err)
			continue
		}
		if ke.Name != name {
			t.Errorf("KeyBytes(%q): KeyError.Name = %q", name, ke.Name)
		}
		if ke.Reason == "" {
			t.Errorf("KeyBytes(%q): empty Reason", name)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "session: bad key ") || !strings.Contains(msg, "valid keys:") {
			t.Errorf("KeyBytes(%q): unexpected message %q", name, msg)
		}
		if len(msg) > 1000 {
			t.Errorf("KeyBytes(%q): message too long (%d bytes)", name, len(msg))
		}
	}
}

func TestKeyErrorMessages(t *testing.T) {
	cases := []struct{ name, want string }{
		{"C-foo", `session: bad key "C-foo": C- takes`},
		{"foo", `session: bad key "foo": unknown key name; valid keys:`},
		{"", "empty"},
		{" ", "whitespace"},
		{"C-", "modifier C- has no key"},
		{"m-", "modifier M- has no key"},
		{"C-C-a", "given twice"},
		{"Ctrl-c", "C-, M- or S-"},
		{"^c", "C-x"},
		{"S-a", "S- cannot modify"},
		{"C-Enter", "Enter accepts only the M- modifier"},
		{"C-Tab", "Tab accepts only"},
		{"\xff", "UTF-8"},
		{"\x01", "non-printable"},
		{strings.Repeat("a", 100), `"` + strings.Repeat("a", 32) + `"... (100 bytes)`},
	}
	for _, tc := range cases {
		_, err := KeyBytes(tc.name)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("KeyBytes(%q) error = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	// Truncation must not split a multi-byte rune.
	_, err := KeyBytes(strings.Repeat("é", 20))
	if err == nil || !strings.Contains(err.Error(), `"`+strings.Repeat("é", 16)+`"...`) {
		t.Errorf("truncated message = %v", err)
	}
}

func TestKeysBytes(t *testing.T) {
	got, err := KeysBytes([]string{"h", "i", "Enter", "C-c", "M-x", "Up", "F5"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "hi\r\x03\x1bx\x1b[A\x1b[15~"; string(got) != want {
		t.Errorf("KeysBytes = %q, want %q", got, want)
	}

	for _, names := range [][]string{nil, {}} {
		got, err := KeysBytes(names)
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("KeysBytes(%#v) = %#v, %v; want empty non-nil, nil", names, got, err)
		}
	}

	// All names from the table at once.
	var names []string
	var want []byte
	for _, tc := range keyTestCases {
		names = append(names, tc.name)
		want = append(want, tc.want...)
	}
	got, err = KeysBytes(names)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("KeysBytes(all) = %q, %v", got, err)
	}
}

func TestKeysBytesError(t *testing.T) {
	for _, bad := range keyBadNames {
		names := []string{"a", "Enter", "C-c", bad, "foo", "b"}
		got, err := KeysBytes(names)
		if got != nil {
			t.Errorf("KeysBytes with %q returned partial bytes %q", bad, got)
		}
		if !errors.Is(err, ErrBadKey) {
			t.Errorf("KeysBytes with %q: error %v does not match ErrBadKey", bad, err)
		}
		var ke *KeyError
		if !errors.As(err, &ke) {
			t.Errorf("KeysBytes with %q: error %T is not *KeyError", bad, err)
			continue
		}
		if ke.Name != bad {
			t.Errorf("KeysBytes with %q: KeyError.Name = %q, want the first bad name", bad, ke.Name)
		}
	}
}

func TestKeyNames(t *testing.T) {
	names := KeyNames()
	if !slices.IsSorted(names) {
		t.Errorf("KeyNames not sorted: %q", names)
	}
	if len(names) != 28 {
		t.Errorf("KeyNames has %d names, want 28: %q", len(names), names)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("duplicate name %q", n)
		}
		seen[n] = true
		if b, err := KeyBytes(n); err != nil || len(b) == 0 {
			t.Errorf("KeyBytes(%q) = %q, %v", n, b, err)
		}
	}
	for _, n := range []string{"Enter", "Tab", "BTab", "Esc", "Space", "BSpace", "Up", "Down",
		"Left", "Right", "Home", "End", "Insert", "Delete", "PgUp", "PgDn", "F1", "F12"} {
		if !seen[n] {
			t.Errorf("KeyNames missing %q", n)
		}
	}
	names[0] = "mutated"
	if KeyNames()[0] == "mutated" {
		t.Error("KeyNames returns shared storage")
	}
}

// keyCaseInsensitive reports whether the result of parsing name must not
// depend on ASCII letter case: true unless the base key is a single
// character without C- (single characters are case-sensitive).
func keyCaseInsensitive(name string) bool {
	mods, base, _ := keySplit(name)
	return utf8.RuneCountInString(base) != 1 || mods.ctrl
}

func FuzzKeyBytes(f *testing.F) {
	for _, tc := range keyTestCases {
		f.Add(tc.name)
	}
	for _, n := range keyBadNames {
		f.Add(n)
	}
	for _, n := range KeyNames() {
		f.Add(n)
		f.Add("C-" + n)
		f.Add("M-" + n)
		f.Add("S-" + n)
		f.Add("C-M-S-" + n)
	}
	f.Fuzz(func(t *testing.T, name string) {
		b, err := KeyBytes(name)
		bs, errs := KeysBytes([]string{name})
		if (err == nil) != (errs == nil) || !bytes.Equal(b, bs) {
			t.Fatalf("KeyBytes(%q) = %q, %v but KeysBytes = %q, %v", name, b, err, bs, errs)
		}
		if err != nil {
			if b != nil {
				t.Fatalf("KeyBytes(%q) returned bytes %q with error", name, b)
			}
			var ke *KeyError
			if !errors.As(err, &ke) || !errors.Is(err, ErrBadKey) {
				t.Fatalf("KeyBytes(%q): error %T %v is not a *KeyError wrapping ErrBadKey", name, err, err)
			}
			if ke.Name != name || ke.Reason == "" {
				t.Fatalf("KeyBytes(%q): bad KeyError %+v", name, ke)
			}
			_ = err.Error()
			return
		}
		if len(b) == 0 || len(b) > 16 {
			t.Fatalf("KeyBytes(%q) = %q: length %d out of range", name, b, len(b))
		}
		if !utf8.ValidString(name) || len(name) > keyMaxName || strings.TrimSpace(name) == "" {
			t.Fatalf("KeyBytes(%q) accepted a name it must reject", name)
		}
		if keyCaseInsensitive(name) {
			for _, v := range []string{strings.ToLower(name), strings.ToUpper(name)} {
				bv, err := KeyBytes(v)
				if err != nil || !bytes.Equal(bv, b) {
					t.Fatalf("KeyBytes(%q) = %q but KeyBytes(%q) = %q, %v", name, b, v, bv, err)
				}
			}
		}
	})
}
