package api

import (
	"errors"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		want string // substring of the error; "" means valid
	}{
		{"web-1", ""},
		{"s3", ""},
		{"A_b-C_9", ""},
		{"-", ""},
		{"_", ""},
		{strings.Repeat("x", 63), ""},
		{"", "empty name"},
		{strings.Repeat("x", 64), "64 bytes long, the limit is 63"},
		{"web.1", `character '.' at position 4 is not allowed`},
		{"a b", `character ' ' at position 2`},
		{"*", `character '*' at position 1`},
		{"web>", `character '>' at position 4`},
		{"a/b", `character '/' at position 2`},
		{"caf\u00e9", `character 'é' at position 4`},
		{"a\xffb", `byte 0xff (not UTF-8) at position 2`},
		{"a\x00", `character '\x00' at position 2`},
		{"tab\there", `character '\t' at position 4`},
	}
	for _, tt := range tests {
		err := ValidName(tt.name)
		if tt.want == "" {
			if err != nil {
				t.Errorf("ValidName(%q) = %v, want nil", tt.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("ValidName(%q) = nil, want an error containing %q", tt.name, tt.want)
			continue
		}
		if !errors.Is(err, ErrBadName) {
			t.Errorf("ValidName(%q) = %v, does not match ErrBadName", tt.name, err)
		}
		if msg := err.Error(); !strings.Contains(msg, tt.want) || !strings.Contains(msg, "NATS subject tokens") {
			t.Errorf("ValidName(%q) = %q, want it to contain %q and mention NATS subject tokens", tt.name, msg, tt.want)
		}
	}
}

func TestValidNameLongNameIsQuotedShort(t *testing.T) {
	err := ValidName(strings.Repeat("é", 1000))
	if err == nil || len(err.Error()) > 300 {
		t.Fatalf("ValidName(long) = %v, want a short error", err)
	}
}

func TestParseAddress(t *testing.T) {
	tests := []struct {
		addr, node, id string
		want           string // substring of the error; "" means valid
	}{
		{addr: "web-1/s3", node: "web-1", id: "s3"},
		{addr: "a/b", node: "a", id: "b"},
		{addr: "", want: `address "" has no '/': want NODE/ID`},
		{addr: "web-1", want: `has no '/'`},
		{addr: "/s3", want: "empty node name"},
		{addr: "web-1/", want: "empty session id"},
		{addr: "web-1/s3/x", want: `session id "s3/x": character '/' at position 3`},
		{addr: "web.1/s3", want: `node name "web.1": character '.'`},
		{addr: "web-1/s*", want: `session id "s*": character '*'`},
		{addr: "web-1/" + strings.Repeat("s", 64), want: "session id"},
	}
	for _, tt := range tests {
		node, id, err := ParseAddress(tt.addr)
		if tt.want == "" {
			if err != nil || node != tt.node || id != tt.id {
				t.Errorf("ParseAddress(%q) = %q, %q, %v; want %q, %q, nil", tt.addr, node, id, err, tt.node, tt.id)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseAddress(%q) = %q, %q, nil; want an error containing %q", tt.addr, node, id, tt.want)
			continue
		}
		if !errors.Is(err, ErrBadName) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseAddress(%q) error = %q; want ErrBadName containing %q", tt.addr, err, tt.want)
		}
		if node != "" || id != "" {
			t.Errorf("ParseAddress(%q) returned %q, %q with an error", tt.addr, node, id)
		}
	}
}

// forbidden are characters with a meaning in NATS subjects.
const forbidden = ". *>"

func FuzzValidName(f *testing.F) {
	for _, s := range []string{"web-1", "", "a.b", "a b", "*", ">", "é", "\xff", strings.Repeat("a", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidName(s)
		if err != nil {
			if !errors.Is(err, ErrBadName) || err.Error() == "" {
				t.Fatalf("ValidName(%q) = %v: want a message wrapping ErrBadName", s, err)
			}
			return
		}
		if len(s) == 0 || len(s) > MaxNameLen || strings.ContainsAny(s, forbidden) {
			t.Fatalf("ValidName(%q) accepted a bad name", s)
		}
		// A valid name round-trips through an address, as node and as session id.
		if n, i, err := ParseAddress(s + "/" + s); err != nil || n != s || i != s {
			t.Fatalf("ParseAddress(%q) = %q, %q, %v", s+"/"+s, n, i, err)
		}
	})
}

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"web-1/s3", "", "/", "a/", "/b", "a/b/c", "a.b/c", "a/b c", "a/>", "a/*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		node, id, err := ParseAddress(s)
		if err != nil {
			if !errors.Is(err, ErrBadName) || node != "" || id != "" {
				t.Fatalf("ParseAddress(%q) = %q, %q, %v", s, node, id, err)
			}
			return
		}
		if node+"/"+id != s {
			t.Fatalf("ParseAddress(%q) = %q, %q: does not round-trip", s, node, id)
		}
		if ValidName(node) != nil || ValidName(id) != nil {
			t.Fatalf("ParseAddress(%q) = %q, %q: parts are not valid names", s, node, id)
		}
		if strings.ContainsAny(node, forbidden) || strings.ContainsAny(id, forbidden) {
			t.Fatalf("ParseAddress(%q) = %q, %q: accepted a NATS subject metacharacter", s, node, id)
		}
	})
}
