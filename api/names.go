package api

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest node name or session id, in bytes.
const MaxNameLen = 63

// ErrBadName is matched (errors.Is) by every error about a malformed node name,
// session id or session address.
var ErrBadName = errors.New("api: bad name")

// ErrNoResponders is wrapped by a bus's request error when nobody serves the
// subject: the node agent is not running (or not connected).
var ErrNoResponders = errors.New("api: no responders")

// ErrKeyExists is wrapped by a key-value store's create error when the key is
// taken.
var ErrKeyExists = errors.New("api: key exists")

// ErrUnavailable is wrapped by the errors of a store (a JetStream bucket) that
// did not answer in time: the request may succeed when tried again.
var ErrUnavailable = errors.New("api: unavailable")

// nameRule is appended to errors so the message alone says how to fix the name.
const nameRule = "names are NATS subject tokens: 1 to 63 of A-Z a-z 0-9 _ -"

// ValidName checks a node name or session id: 1 to MaxNameLen bytes of A-Z, a-z, 0-9,
// '_' and '-'. Names are NATS subject tokens, so dots, spaces, '*', '>' and anything
// else are rejected. The error wraps ErrBadName and says what is wrong.
func ValidName(s string) error {
	return validName("name", s)
}

// ParseAddress splits a session address "NODE/ID" (e.g. "web-1/s3") into its node
// name and session id, both checked with ValidName. The error wraps ErrBadName.
func ParseAddress(addr string) (node, id string, err error) {
	node, id, ok := strings.Cut(addr, "/")
	if !ok {
		return "", "", fmt.Errorf("%w: address %s has no '/': want NODE/ID, e.g. web-1/s3", ErrBadName, quote(addr))
	}
	if err := validName("node name", node); err != nil {
		return "", "", fmt.Errorf("address %s: %w", quote(addr), err)
	}
	if err := validName("session id", id); err != nil {
		return "", "", fmt.Errorf("address %s: %w", quote(addr), err)
	}
	return node, id, nil
}

func validName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s (%s)", ErrBadName, what, nameRule)
	case len(s) > MaxNameLen:
		return fmt.Errorf("%w: %s %s is %d bytes long, the limit is %d (%s)", ErrBadName, what, quote(s), len(s), MaxNameLen, nameRule)
	}
	for i := 0; i < len(s); i++ {
		if nameByte(s[i]) {
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		bad := fmt.Sprintf("character %q", r)
		if r == utf8.RuneError && size <= 1 {
			bad = fmt.Sprintf("byte 0x%02x (not UTF-8)", s[i])
		}
		return fmt.Errorf("%w: %s %s: %s at position %d is not allowed (%s)", ErrBadName, what, quote(s), bad, i+1, nameRule)
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// quote quotes s for an error message, cut short when it is long.
func quote(s string) string {
	const max = 80
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q...", s[:cut])
}
