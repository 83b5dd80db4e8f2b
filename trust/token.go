package trust

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// API tokens (DESIGN.md, Trust model). A token's text is "fmx1.NAME.SECRET": the
// version, the token's name (api.ValidName, so it holds no dot) and 32 random
// bytes, base64url. The name is not secret: it is how a controller finds the
// token's record (the key in FLEETMUX_TOKENS); the record keeps only the sha256
// of the whole text. The secret carries 256 bits of entropy, so a plain hash is
// enough (nothing to brute-force), and hashes are compared in constant time.

// tokenVersion starts every token's text.
const tokenVersion = "fmx1"

// secretBytes is the randomness of a token.
const secretBytes = 32

// BootstrapName is the name of the one admin token a controller is started with
// (--api-token): no stored token may take it.
const BootstrapName = "bootstrap"

// Errors of tokens, matched with errors.Is.
var (
	// ErrTokenFormat: the text is not a fleetmux token.
	ErrTokenFormat = errors.New("trust: not a fleetmux API token")
	// ErrTokenInvalid: the token is unknown, wrong, revoked or expired.
	ErrTokenInvalid = errors.New("trust: invalid API token")
)

// TokenRecord is what a token store keeps of a token: the listing (api.Token)
// and the hash of its text.
type TokenRecord struct {
	api.Token
	// Hash is the hex sha256 of the token's text.
	Hash string `json:"hash"`
}

// ValidTokenName checks a token's name: api.ValidName, and not BootstrapName.
func ValidTokenName(name string) error {
	if err := api.ValidName(name); err != nil {
		return err
	}
	if name == BootstrapName {
		return fmt.Errorf("%w: token name %q is reserved", api.ErrBadName, name)
	}
	return nil
}

// NewToken makes a token named name with role, valid for ttl (0: forever) from
// now: its text (to show once) and its record (to store).
func NewToken(name, role string, ttl time.Duration, by string, now time.Time) (text string, rec TokenRecord, err error) {
	if err := ValidTokenName(name); err != nil {
		return "", TokenRecord{}, err
	}
	if !ValidRole(role) {
		return "", TokenRecord{}, fmt.Errorf("trust: role %q: want %s, %s or %s", role, api.RoleViewer, api.RoleOperator, api.RoleAdmin)
	}
	if ttl < 0 {
		return "", TokenRecord{}, fmt.Errorf("trust: negative token lifetime %v", ttl)
	}
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", TokenRecord{}, fmt.Errorf("trust: token secret: %w", err)
	}
	text = tokenVersion + "." + name + "." + base64.RawURLEncoding.EncodeToString(b)
	rec = TokenRecord{Token: api.Token{Name: name, Role: role, CreatedAt: now.UTC(), CreatedBy: by}, Hash: HashToken(text)}
	if ttl > 0 {
		exp := now.Add(ttl).UTC()
		rec.ExpiresAt = &exp
	}
	return text, rec, nil
}

// TokenName returns the name a token's text carries, or an error wrapping
// ErrTokenFormat. It does not check the secret.
func TokenName(text string) (string, error) {
	rest, ok := strings.CutPrefix(text, tokenVersion+".")
	if !ok {
		return "", ErrTokenFormat
	}
	name, secret, ok := strings.Cut(rest, ".")
	if !ok || api.ValidName(name) != nil {
		return "", ErrTokenFormat
	}
	if b, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(b) != secretBytes {
		return "", ErrTokenFormat
	}
	return name, nil
}

// HashToken is the hex sha256 of a token's text, as a record keeps it.
func HashToken(text string) string {
	h := sha256.Sum256([]byte(text))
	return hex.EncodeToString(h[:])
}

// Check returns nil when text is this record's token and it has not expired at
// now, else an error wrapping ErrTokenInvalid (saying why, for the operator's log).
// The hashes are compared in constant time.
func (r TokenRecord) Check(text string, now time.Time) error {
	want, err := hex.DecodeString(r.Hash)
	if err != nil || len(want) != sha256.Size {
		return fmt.Errorf("%w: record %q has a malformed hash", ErrTokenInvalid, r.Name)
	}
	got := sha256.Sum256([]byte(text))
	if subtle.ConstantTimeCompare(got[:], want) != 1 {
		return fmt.Errorf("%w: wrong secret for %q", ErrTokenInvalid, r.Name)
	}
	if r.Expired(now) {
		return fmt.Errorf("%w: %q expired at %s", ErrTokenInvalid, r.Name, r.ExpiresAt.Format(time.RFC3339))
	}
	if !ValidRole(r.Role) {
		return fmt.Errorf("%w: record %q has no valid role", ErrTokenInvalid, r.Name)
	}
	return nil
}

// Expired reports whether the token has expired at now.
func (r TokenRecord) Expired(now time.Time) bool {
	return r.ExpiresAt != nil && !now.Before(*r.ExpiresAt)
}

// EncodeRecord and DecodeRecord are a record's stored form (JSON).
func EncodeRecord(r TokenRecord) ([]byte, error) { return json.Marshal(r) }

// DecodeRecord decodes a stored record of the token named key and checks that it
// is one (its name is key, its role valid).
func DecodeRecord(key string, b []byte) (TokenRecord, error) {
	var r TokenRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return TokenRecord{}, fmt.Errorf("trust: token record %q: %w", key, err)
	}
	if r.Name != key || !ValidRole(r.Role) || r.Hash == "" {
		return TokenRecord{}, fmt.Errorf("trust: token record %q is malformed", key)
	}
	return r, nil
}

// CheckBootstrap returns nil when text is the bootstrap token want (any text the
// operator chose), compared in constant time over their hashes.
func CheckBootstrap(text, want string) error {
	a, b := sha256.Sum256([]byte(text)), sha256.Sum256([]byte(want))
	if want == "" || subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		return ErrTokenInvalid
	}
	return nil
}
