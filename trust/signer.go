package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Envelope lifetimes: a request is valid for DefaultLifetime after it is signed,
// and a node refuses one that claims more than MaxLifetime.
const (
	DefaultLifetime = 30 * time.Second
	MaxLifetime     = 60 * time.Second
)

// Signer signs node requests as one controller: its certificate and key. It is safe
// for concurrent use.
type Signer struct {
	cert string
	name string
	key  ed25519.PrivateKey
}

// NewSigner checks that key is the key the certificate vouches for (it does not
// check the root's signature: nodes do) and returns its signer.
func NewSigner(cert string, key ed25519.PrivateKey) (*Signer, error) {
	c, err := ParseCert(cert)
	if err != nil {
		return nil, fmt.Errorf("trust: signer: %w", err)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("trust: signer: private key of %d bytes", len(key))
	}
	if !bytes.Equal(key.Public().(ed25519.PublicKey), c.Key) {
		return nil, errors.New("trust: signer: the private key is not the one the certificate names")
	}
	return &Signer{cert: cert, name: c.Name, key: key}, nil
}

// Name is the controller's name in the certificate.
func (s *Signer) Name() string { return s.name }

// Claims is who a request is made for, as the controller signs it.
type Claims struct {
	// Actor is the label the client gave itself (api.HeaderActor, "mcp:NAME"),
	// for the audit: anyone may claim any label, so it never identifies anyone.
	Actor string
	// Principal is who the controller authenticated: "token:NAME",
	// "ssh:FINGERPRINT" (or "ssh:CERT-PRINCIPAL:FINGERPRINT"). Required. This is
	// what audits and policies identify a caller by.
	Principal string
	// Role is the principal's role (ValidRole).
	Role string
}

// Sign returns the value of the Fleetmux-Auth header for a request of body to
// subject, made for who, valid for DefaultLifetime from now.
func (s *Signer) Sign(subject string, body []byte, who Claims) (string, error) {
	return s.SignAt(time.Now(), DefaultLifetime, subject, body, who)
}

// SignAt is Sign with the issue time and the lifetime given (0 < lifetime ≤
// MaxLifetime), e.g. for tests of expiry.
func (s *Signer) SignAt(issued time.Time, lifetime time.Duration, subject string, body []byte, who Claims) (string, error) {
	if lifetime <= 0 || lifetime > MaxLifetime {
		return "", fmt.Errorf("trust: sign: lifetime %v (want 0 < lifetime ≤ %v)", lifetime, MaxLifetime)
	}
	if subject == "" || len(subject) > maxSubjectLen {
		return "", fmt.Errorf("trust: sign: subject of %d bytes (want 1 to %d)", len(subject), maxSubjectLen)
	}
	if len(who.Actor) > maxActorLen || !utf8.ValidString(who.Actor) {
		return "", fmt.Errorf("trust: sign: actor over %d bytes or not UTF-8", maxActorLen)
	}
	if who.Principal == "" || len(who.Principal) > maxPrincipalLen || !utf8.ValidString(who.Principal) {
		return "", fmt.Errorf("trust: sign: principal empty, over %d bytes or not UTF-8", maxPrincipalLen)
	}
	if !ValidRole(who.Role) {
		return "", fmt.Errorf("trust: sign: unknown role %q", who.Role)
	}
	e := envelope{
		cert:      s.cert,
		subject:   subject,
		bodyHash:  sha256.Sum256(body),
		actor:     who.Actor,
		principal: who.Principal,
		role:      who.Role,
		issued:    issued.UnixNano(),
		expires:   issued.Add(lifetime).UnixNano(),
	}
	_, _ = rand.Read(e.id[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return s.seal(&e), nil
}

// seal encodes and signs e: base64url(payload) "." base64url(signature), built in
// one buffer.
func (s *Signer) seal(e *envelope) string {
	n := e.payloadLen()
	payload := e.appendPayload(make([]byte, 0, n))
	sig := ed25519.Sign(s.key, payload)
	out := make([]byte, 0, b64.EncodedLen(n)+1+b64.EncodedLen(len(sig)))
	out = b64.AppendEncode(out, payload)
	out = append(out, '.')
	out = b64.AppendEncode(out, sig)
	return string(out)
}
