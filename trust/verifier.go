package trust

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Why Verify refuses a request; errors wrap exactly one of these (errors.Is).
var (
	ErrUnsigned     = errors.New("trust: request is not signed")
	ErrMalformed    = errors.New("trust: malformed signature envelope")
	ErrUnknownKey   = errors.New("trust: signed by an unknown or expired controller certificate")
	ErrBadSignature = errors.New("trust: bad signature")
	ErrExpired      = errors.New("trust: signature expired or not yet valid")
	ErrReplayed     = errors.New("trust: request replayed")
	ErrUnknownRole  = errors.New("trust: unknown role")
	// ErrReplayFull means the replay cache holds its limit of live request ids:
	// the request is refused (never accepted unchecked); retry later.
	ErrReplayFull = errors.New("trust: too many requests in flight to check for replays")
	// ErrBeforeStart means the envelope was issued before this Verifier was
	// created (less StartMargin): its request id may have been accepted by the
	// verifier's predecessor (a node before its restart), whose replay cache is
	// gone. A fresh request (signed again) is accepted: callers may retry.
	ErrBeforeStart = errors.New("trust: request signed before the node started")
)

// StartMargin is how long before its creation a Verifier still accepts envelopes
// issued (see ErrBeforeStart). A request signed in the second before a node
// restarts is refused once, retryably; a captured request can be replayed to the
// restarted node only if it was issued within this margin of its start (plus
// however far the signer's clock runs ahead of the node's). A signer whose clock
// runs more than StartMargin behind the node's has its requests refused for that
// difference after a restart; MaxSkew, which bounds the difference, bounds that
// window too.
const StartMargin = time.Second

// Defaults of VerifierConfig.
const (
	DefaultMaxSkew   = 10 * time.Second
	DefaultMaxReplay = 1 << 19
	DefaultMaxCerts  = 64
)

// VerifierConfig configures a Verifier. Roots is required.
type VerifierConfig struct {
	// Roots are the fleet root public keys whose certificates are trusted.
	Roots []ed25519.PublicKey
	// MaxSkew is how far clocks may disagree: an envelope issued up to MaxSkew in
	// the future, or expired up to MaxSkew ago, is accepted (default DefaultMaxSkew).
	MaxSkew time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// MaxReplay bounds the request ids remembered at once (default
	// DefaultMaxReplay); each is forgotten once its envelope has expired. When it
	// is full, requests are refused with ErrReplayFull.
	MaxReplay int
	// MaxCerts bounds the verified certificates kept (default DefaultMaxCerts).
	MaxCerts int
}

// Principal is who a verified request comes from.
type Principal struct {
	Controller string // the name in the controller's certificate
	// Actor is the label the caller gave itself: anyone may claim any label, so
	// audits show it and policies must not identify callers by it.
	Actor string
	// Principal is who the controller authenticated ("token:NAME",
	// "ssh:FINGERPRINT"): never empty. Identify callers by this.
	Principal string
	Role      string // the principal's role (ValidRole)
	RequestID string // hex
}

// Verifier checks signed request envelopes. It is safe for concurrent use.
type Verifier struct {
	roots    []ed25519.PublicKey
	skew     time.Duration
	now      func() time.Time
	maxCerts int
	start    time.Time        // when it was created (Now)
	certMu   sync.Mutex       // guards certs
	certs    map[string]*Cert // certificate text → its content, signed by a root
	replay   replayCache
}

// NewVerifier validates cfg.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if len(cfg.Roots) == 0 {
		return nil, errors.New("trust: verifier: no trusted root key")
	}
	for _, r := range cfg.Roots {
		if len(r) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("trust: verifier: root key of %d bytes", len(r))
		}
	}
	if cfg.MaxSkew < 0 {
		return nil, errors.New("trust: verifier: negative clock skew")
	}
	if cfg.MaxSkew == 0 {
		cfg.MaxSkew = DefaultMaxSkew
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxReplay <= 0 {
		cfg.MaxReplay = DefaultMaxReplay
	}
	if cfg.MaxCerts <= 0 {
		cfg.MaxCerts = DefaultMaxCerts
	}
	return &Verifier{
		roots:    append([]ed25519.PublicKey(nil), cfg.Roots...),
		skew:     cfg.MaxSkew,
		now:      cfg.Now,
		maxCerts: cfg.MaxCerts,
		start:    cfg.Now(),
		certs:    map[string]*Cert{},
		replay:   replayCache{max: cfg.MaxReplay, seen: map[[requestIDLen]byte]int64{}},
	}, nil
}

// Verify checks the Fleetmux-Auth header of a request of body to subject and says
// who signed it. The checks, in order: the header is present (ErrUnsigned) and
// well formed (ErrMalformed); its certificate is signed by a root and valid now
// (ErrUnknownKey); the envelope's signature is the certificate key's, and it names
// this subject and this body (ErrBadSignature); it was not issued in the future, has
// not expired and claims no more than MaxLifetime (ErrExpired); it was issued no
// earlier than StartMargin before the Verifier was created (ErrBeforeStart); its
// request id is new (ErrReplayed, or ErrReplayFull); it names a principal
// (ErrMalformed); its role is known (ErrUnknownRole).
// Messages say what is wrong and never echo a signature or a key.
func (v *Verifier) Verify(subject string, body []byte, header string) (Principal, error) {
	if header == "" {
		return Principal{}, ErrUnsigned
	}
	e, payload, sig, err := parseHeader(header)
	if err != nil {
		return Principal{}, err
	}
	now := v.now()
	cert, err := v.cert(e.cert, now)
	if err != nil {
		return Principal{}, err
	}
	if !ed25519.Verify(cert.Key, payload, sig) {
		return Principal{}, fmt.Errorf("%w: the envelope is not signed by controller %s's key", ErrBadSignature, cert.Name)
	}
	if e.subject != subject {
		return Principal{}, fmt.Errorf("%w: signed for subject %q, sent to %q", ErrBadSignature, e.subject, subject)
	}
	if sum := sha256.Sum256(body); subtle.ConstantTimeCompare(sum[:], e.bodyHash[:]) != 1 {
		return Principal{}, fmt.Errorf("%w: the body is not the one signed", ErrBadSignature)
	}
	issued, expires := time.Unix(0, e.issued), time.Unix(0, e.expires)
	switch {
	case !expires.After(issued) || expires.Sub(issued) > MaxLifetime:
		return Principal{}, fmt.Errorf("%w: lifetime %v (limit %v)", ErrExpired, expires.Sub(issued), MaxLifetime)
	case issued.After(now.Add(v.skew)):
		return Principal{}, fmt.Errorf("%w: issued %v in the future (clocks differ by more than %v?)", ErrExpired, issued.Sub(now).Round(time.Millisecond), v.skew)
	case now.After(expires.Add(v.skew)):
		return Principal{}, fmt.Errorf("%w: expired %v ago", ErrExpired, now.Sub(expires).Round(time.Millisecond))
	case issued.Before(v.start.Add(-StartMargin)):
		return Principal{}, fmt.Errorf("%w: issued %v before it started: retry", ErrBeforeStart, v.start.Sub(issued).Round(time.Millisecond))
	}
	if err := v.replay.add(e.id, expires.Add(v.skew).UnixNano(), now.UnixNano()); err != nil {
		return Principal{}, err
	}
	if e.principal == "" {
		return Principal{}, fmt.Errorf("%w: no principal", ErrMalformed)
	}
	if !ValidRole(e.role) {
		return Principal{}, fmt.Errorf("%w %q", ErrUnknownRole, e.role)
	}
	return Principal{Controller: cert.Name, Actor: e.actor, Principal: e.principal, Role: e.role, RequestID: hex.EncodeToString(e.id[:])}, nil
}

// cert returns the content of a certificate signed by one of the roots and valid
// at now. Verified certificates are kept (at most maxCerts; the set is dropped
// when full) so that a request costs one signature check.
func (v *Verifier) cert(text string, now time.Time) (*Cert, error) {
	v.certMu.Lock()
	c := v.certs[text]
	v.certMu.Unlock()
	if c == nil {
		parsed, body, sig, err := splitCert(text)
		if err != nil {
			return nil, err
		}
		msg := certMessage(body)
		signed := false
		for _, root := range v.roots {
			if ed25519.Verify(root, msg, sig) {
				signed = true
				break
			}
		}
		if !signed {
			return nil, fmt.Errorf("%w: controller %s's certificate is not signed by a trusted root", ErrUnknownKey, parsed.Name)
		}
		c = &parsed
		v.certMu.Lock()
		if len(v.certs) >= v.maxCerts {
			clear(v.certs)
		}
		v.certs[text] = c
		v.certMu.Unlock()
	}
	if now.Before(c.NotBefore.Add(-v.skew)) {
		return nil, fmt.Errorf("%w: controller %s's certificate is valid from %s", ErrUnknownKey, c.Name, c.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(c.NotAfter.Add(v.skew)) {
		return nil, fmt.Errorf("%w: controller %s's certificate expired at %s", ErrUnknownKey, c.Name, c.NotAfter.UTC().Format(time.RFC3339))
	}
	return c, nil
}

// replayCache remembers the request ids of accepted envelopes until they expire.
type replayCache struct {
	max   int
	mu    sync.Mutex                   // guards the fields below
	seen  map[[requestIDLen]byte]int64 // request id → when it may be forgotten (Unix ns)
	queue []replayEntry                // the ids in the order they were added, from head
	head  int
}

type replayEntry struct {
	id    [requestIDLen]byte
	until int64
}

// add records id until the time until, or refuses it: ErrReplayed when it is
// remembered, ErrReplayFull when max ids are.
func (c *replayCache) add(id [requestIDLen]byte, until, now int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.seen[id]; ok && t >= now {
		return fmt.Errorf("%w: request id %x was already used", ErrReplayed, id[:])
	}
	c.pruneLocked(now)
	if len(c.seen) >= c.max {
		c.sweepLocked(now)
		if len(c.seen) >= c.max {
			return fmt.Errorf("%w (%d)", ErrReplayFull, c.max)
		}
	}
	c.seen[id] = until
	c.queue = append(c.queue, replayEntry{id, until})
	return nil
}

// pruneLocked forgets the ids at the head of the queue that have expired. An id
// behind one that lives longer waits for it (at most MaxLifetime plus the skew).
func (c *replayCache) pruneLocked(now int64) {
	for c.head < len(c.queue) && c.queue[c.head].until < now {
		e := c.queue[c.head]
		if c.seen[e.id] == e.until {
			delete(c.seen, e.id)
		}
		c.queue[c.head] = replayEntry{}
		c.head++
	}
	if c.head > 1024 && c.head*2 > len(c.queue) {
		c.queue = append(c.queue[:0], c.queue[c.head:]...)
		c.head = 0
	}
}

// sweepLocked forgets every expired id, wherever it is in the queue.
func (c *replayCache) sweepLocked(now int64) {
	kept := c.queue[:0]
	for _, e := range c.queue[c.head:] {
		if e.until < now {
			if c.seen[e.id] == e.until {
				delete(c.seen, e.id)
			}
			continue
		}
		kept = append(kept, e)
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	c.head = 0
}
