package trust

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// fixture is a root, a controller certificate and its signer.
type fixture struct {
	rootPub ed25519.PublicKey
	rootKey ed25519.PrivateKey
	ctlKey  ed25519.PrivateKey
	cert    string
	signer  *Signer
	now     time.Time
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{now: time.Now()}
	var err error
	if f.rootPub, f.rootKey, err = GenerateKey(); err != nil {
		t.Fatal(err)
	}
	var ctlPub ed25519.PublicKey
	if ctlPub, f.ctlKey, err = GenerateKey(); err != nil {
		t.Fatal(err)
	}
	if f.cert, err = IssueCert(f.rootKey, "ctl-1", ctlPub, f.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if f.signer, err = NewSigner(f.cert, f.ctlKey); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) verifier(t testing.TB, cfg VerifierConfig) *Verifier {
	t.Helper()
	if cfg.Roots == nil {
		cfg.Roots = []ed25519.PublicKey{f.rootPub}
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return f.now }
	}
	v, err := NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

const subj = "fleetmux.rpc.n1.run"

var body = []byte(`{"session":"s1","command":"id"}`)

func TestVerifyAccepts(t *testing.T) {
	f := newFixture(t)
	v := f.verifier(t, VerifierConfig{})
	h, err := f.signer.SignAt(f.now, DefaultLifetime, subj, body, Claims{Actor: "token:ci", Principal: "token:ci", Role: api.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(subj, body, h)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if p.Controller != "ctl-1" || p.Actor != "token:ci" || p.Principal != "token:ci" || p.Role != api.RoleOperator || len(p.RequestID) != 32 {
		t.Fatalf("principal = %+v", p)
	}
	// An empty body and an empty actor are fine.
	h, _ = f.signer.SignAt(f.now, DefaultLifetime, subj, nil, Claims{Actor: "", Principal: "token:ci", Role: api.RoleViewer})
	if _, err := v.Verify(subj, []byte{}, h); err != nil {
		t.Fatalf("empty body: %v", err)
	}
}

// resign replaces the payload of a header with mutate's and signs it again with key.
func resign(t *testing.T, header string, key ed25519.PrivateKey, mutate func(*envelope)) string {
	t.Helper()
	e, _, _, err := parseHeader(header)
	if err != nil {
		t.Fatal(err)
	}
	mutate(&e)
	return (&Signer{cert: e.cert, key: key}).seal(&e)
}

func TestVerifyRefuses(t *testing.T) {
	f := newFixture(t)
	sign := func(issued time.Time, lifetime time.Duration, s string, b []byte, role string) string {
		t.Helper()
		h, err := f.signer.SignAt(issued, lifetime, s, b, Claims{Actor: "someone", Principal: "token:ci", Role: role})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	good := sign(f.now, DefaultLifetime, subj, body, api.RoleAdmin)

	_, otherRoot, _ := GenerateKey()
	ctlPub := f.ctlKey.Public().(ed25519.PublicKey)
	foreignCert, _ := IssueCert(otherRoot, "ctl-1", ctlPub, f.now.Add(time.Hour))
	expiredCert, _ := issueCert(f.rootKey, "ctl-1", ctlPub, f.now.Add(-2*time.Hour), f.now.Add(-time.Hour))
	futureCert, _ := issueCert(f.rootKey, "ctl-1", ctlPub, f.now.Add(time.Hour), f.now.Add(2*time.Hour))
	_, strangerKey, _ := GenerateKey()
	payload, sig, _ := strings.Cut(good, ".")
	// A well-signed payload with a byte after the request id.
	_, p, _, _ := parseHeader(good)
	p = append(p, 0)
	trailing := b64.EncodeToString(p) + "." + b64.EncodeToString(ed25519.Sign(f.ctlKey, p))
	flipped := []byte(sig)
	if flipped[3] == 'A' {
		flipped[3] = 'B'
	} else {
		flipped[3] = 'A'
	}

	for _, tc := range []struct {
		name    string
		subject string
		body    []byte
		header  string
		want    error
	}{
		{"missing", subj, body, "", ErrUnsigned},
		{"garbage", subj, body, "hello", ErrMalformed},
		{"no signature part", subj, body, payload, ErrMalformed},
		{"bad base64", subj, body, "!!!." + sig, ErrMalformed},
		{"short signature", subj, body, payload + "." + sig[:20], ErrMalformed},
		{"truncated payload", subj, body, payload[:len(payload)-8] + "." + sig, ErrMalformed},
		{"trailing bytes", subj, body, trailing, ErrMalformed},
		{"huge header", subj, body, strings.Repeat("A", maxHeaderLen+1) + "." + sig, ErrMalformed},
		{"cert by another root", subj, body, resign(t, good, f.ctlKey, func(e *envelope) { e.cert = foreignCert }), ErrUnknownKey},
		{"expired cert", subj, body, resign(t, good, f.ctlKey, func(e *envelope) { e.cert = expiredCert }), ErrUnknownKey},
		{"cert not yet valid", subj, body, resign(t, good, f.ctlKey, func(e *envelope) { e.cert = futureCert }), ErrUnknownKey},
		{"cert garbage", subj, body, resign(t, good, f.ctlKey, func(e *envelope) { e.cert = "x.y" }), ErrMalformed},
		{"signed by a key that is not the cert's", subj, body, resign(t, good, strangerKey, func(e *envelope) {}), ErrBadSignature},
		{"signature flipped", subj, body, payload + "." + string(flipped), ErrBadSignature},
		{"other subject", "fleetmux.rpc.n2.run", body, sign(f.now, DefaultLifetime, subj, body, api.RoleAdmin), ErrBadSignature},
		{"other verb", "fleetmux.rpc.n1.close", body, sign(f.now, DefaultLifetime, subj, body, api.RoleAdmin), ErrBadSignature},
		{"body tampered", subj, []byte(`{"session":"s1","command":"rm -rf /"}`), sign(f.now, DefaultLifetime, subj, body, api.RoleAdmin), ErrBadSignature},
		{"body dropped", subj, nil, sign(f.now, DefaultLifetime, subj, body, api.RoleAdmin), ErrBadSignature},
		{"expired", subj, body, sign(f.now.Add(-time.Minute), 30*time.Second, subj, body, api.RoleAdmin), ErrExpired},
		{"issued in the future", subj, body, sign(f.now.Add(time.Minute), 30*time.Second, subj, body, api.RoleAdmin), ErrExpired},
		{"lifetime over the limit", subj, body, resign(t, good, f.ctlKey, func(e *envelope) { e.expires = e.issued + int64(MaxLifetime) + 1 }), ErrExpired},
		{"expires before issued", subj, body, resign(t, good, f.ctlKey, func(e *envelope) { e.expires = e.issued - 1 }), ErrExpired},
		{"unknown role", subj, body, resign(t, good, f.ctlKey, func(e *envelope) { e.role = "root" }), ErrUnknownRole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := f.verifier(t, VerifierConfig{})
			_, err := v.Verify(tc.subject, tc.body, tc.header)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			for _, secret := range []string{sig, payload[:40]} {
				if err != nil && strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q echoes the header", err)
				}
			}
		})
	}
}

func TestVerifySkew(t *testing.T) {
	f := newFixture(t)
	// The verifier started a minute ago (TestVerifyRefusesBeforeStart is about
	// envelopes issued before it started).
	clock := f.now.Add(-time.Minute)
	v := f.verifier(t, VerifierConfig{MaxSkew: 5 * time.Second, Now: func() time.Time { return clock }})
	clock = f.now
	// Issued 4 s in the future, expired 4 s ago: within the skew.
	for _, issued := range []time.Time{f.now.Add(4 * time.Second), f.now.Add(-34 * time.Second)} {
		h, _ := f.signer.SignAt(issued, 30*time.Second, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleViewer})
		if _, err := v.Verify(subj, body, h); err != nil {
			t.Fatalf("issued %v: %v", issued.Sub(f.now), err)
		}
	}
	for _, issued := range []time.Time{f.now.Add(6 * time.Second), f.now.Add(-36 * time.Second)} {
		h, _ := f.signer.SignAt(issued, 30*time.Second, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleViewer})
		if _, err := v.Verify(subj, body, h); !errors.Is(err, ErrExpired) {
			t.Fatalf("issued %v: %v, want ErrExpired", issued.Sub(f.now), err)
		}
	}
}

func TestVerifyReplay(t *testing.T) {
	f := newFixture(t)
	now := f.now
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	v := f.verifier(t, VerifierConfig{Now: clock, MaxSkew: time.Second, MaxReplay: 3})
	h, _ := f.signer.SignAt(f.now, 10*time.Second, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleOperator})
	if _, err := v.Verify(subj, body, h); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(subj, body, h); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay: %v", err)
	}
	// The cache holds 3 ids: two more fit, the fourth is refused (not evicted).
	for i := range 2 {
		h, _ := f.signer.SignAt(f.now, 10*time.Second, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleOperator})
		if _, err := v.Verify(subj, body, h); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	h4, _ := f.signer.SignAt(f.now, 10*time.Second, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleOperator})
	if _, err := v.Verify(subj, body, h4); !errors.Is(err, ErrReplayFull) {
		t.Fatalf("full cache: %v", err)
	}
	if _, err := v.Verify(subj, body, h); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay while full: %v", err)
	}
	// Once they expire (plus the skew), their ids are forgotten and room is made;
	// the old envelope is refused as expired, never accepted again.
	mu.Lock()
	now = now.Add(11*time.Second + time.Millisecond)
	mu.Unlock()
	if _, err := v.Verify(subj, body, h); !errors.Is(err, ErrExpired) {
		t.Fatalf("old envelope after expiry: %v", err)
	}
	h5, _ := f.signer.SignAt(now, 10*time.Second, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleOperator})
	if _, err := v.Verify(subj, body, h5); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if n := len(v.replay.seen); n != 1 {
		t.Fatalf("replay cache holds %d ids, want 1", n)
	}
}

// TestReplaySweep: an id behind a longer-lived one is still forgotten when the cache
// is full.
func TestReplaySweep(t *testing.T) {
	c := replayCache{max: 2, seen: map[[requestIDLen]byte]int64{}}
	if err := c.add([16]byte{1}, 100, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.add([16]byte{2}, 10, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.add([16]byte{3}, 100, 20); err != nil {
		t.Fatalf("full of one expired id: %v", err)
	}
	if err := c.add([16]byte{1}, 100, 20); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay of a live id: %v", err)
	}
}

func TestVerifyConcurrent(t *testing.T) {
	f := newFixture(t)
	v := f.verifier(t, VerifierConfig{Now: time.Now})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				h, _ := f.signer.Sign(subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleAdmin})
				if _, err := v.Verify(subj, body, h); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestVerifierCertCacheBounded(t *testing.T) {
	f := newFixture(t)
	v := f.verifier(t, VerifierConfig{MaxCerts: 2})
	for i := range 5 {
		pub, key, _ := GenerateKey()
		cert, _ := IssueCert(f.rootKey, "ctl-"+string(rune('a'+i)), pub, f.now.Add(time.Hour))
		s, err := NewSigner(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := s.SignAt(f.now, DefaultLifetime, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleViewer})
		if _, err := v.Verify(subj, body, h); err != nil {
			t.Fatal(err)
		}
		if len(v.certs) > 2 {
			t.Fatalf("cert cache holds %d", len(v.certs))
		}
	}
}

func TestSignerChecks(t *testing.T) {
	f := newFixture(t)
	_, other, _ := GenerateKey()
	if _, err := NewSigner(f.cert, other); err == nil {
		t.Fatal("NewSigner accepted a key that is not the certificate's")
	}
	if _, err := NewSigner("nonsense", f.ctlKey); !errors.Is(err, ErrMalformed) {
		t.Fatalf("NewSigner(nonsense) = %v", err)
	}
	for _, tc := range []struct {
		lifetime  time.Duration
		subject   string
		actor     string
		principal string
		role      string
	}{
		{0, subj, "a", "token:ci", api.RoleAdmin},
		{MaxLifetime + 1, subj, "a", "token:ci", api.RoleAdmin},
		{time.Second, "", "a", "token:ci", api.RoleAdmin},
		{time.Second, subj, strings.Repeat("x", maxActorLen+1), "token:ci", api.RoleAdmin},
		{time.Second, subj, "\xff", "token:ci", api.RoleAdmin},
		{time.Second, subj, "a", "", api.RoleAdmin},
		{time.Second, subj, "a", strings.Repeat("x", maxPrincipalLen+1), api.RoleAdmin},
		{time.Second, subj, "a", "\xff", api.RoleAdmin},
		{time.Second, subj, "a", "token:ci", "root"},
	} {
		if _, err := f.signer.SignAt(f.now, tc.lifetime, tc.subject, body, Claims{Actor: tc.actor, Principal: tc.principal, Role: tc.role}); err == nil {
			t.Errorf("SignAt(%v, %q, %q, %q, %q) signed", tc.lifetime, tc.subject, tc.actor, tc.principal, tc.role)
		}
	}
	if f.signer.Name() != "ctl-1" {
		t.Fatalf("Name = %q", f.signer.Name())
	}
}

func TestNewVerifierConfig(t *testing.T) {
	if _, err := NewVerifier(VerifierConfig{}); err == nil {
		t.Fatal("no roots accepted")
	}
	if _, err := NewVerifier(VerifierConfig{Roots: []ed25519.PublicKey{{1, 2}}}); err == nil {
		t.Fatal("short root accepted")
	}
	f := newFixture(t)
	if _, err := NewVerifier(VerifierConfig{Roots: []ed25519.PublicKey{f.rootPub}, MaxSkew: -1}); err == nil {
		t.Fatal("negative skew accepted")
	}
}

func FuzzParseHeader(f *testing.F) {
	fx := newFixture(f)
	h, _ := fx.signer.Sign(subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleAdmin})
	f.Add(h)
	f.Add("")
	f.Add(".")
	f.Add("Rk1BMQ.AAAA")
	v := fx.verifier(f, VerifierConfig{Now: time.Now})
	f.Fuzz(func(t *testing.T, header string) {
		e, payload, _, err := parseHeader(header)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("parse error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// A parsed payload encodes back to the same bytes: one encoding per envelope.
		if got := e.appendPayload(nil); string(got) != string(payload) {
			t.Fatalf("re-encoding differs:\n%x\n%x", got, payload)
		}
		_, _ = v.Verify(subj, body, header) // must not panic
	})
}

func BenchmarkSign(b *testing.B) {
	f := newFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.signer.Sign(subj, body, Claims{Actor: "token:ci", Principal: "token:ci", Role: api.RoleOperator}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	f := newFixture(b)
	v := f.verifier(b, VerifierConfig{Now: time.Now})
	headers := make([]string, 0, 4096)
	for range cap(headers) {
		h, _ := f.signer.Sign(subj, body, Claims{Actor: "token:ci", Principal: "token:ci", Role: api.RoleOperator})
		headers = append(headers, h)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(headers) { // fresh ids: a new verifier (outside the timing would be nicer; it is cheap)
			b.StopTimer()
			v = f.verifier(b, VerifierConfig{Now: time.Now})
			i = 0
			b.StartTimer()
		}
		if _, err := v.Verify(subj, body, headers[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestVerifyPrincipal: the principal is signed as its own field, apart from the
// label; an envelope whose principal is changed, or that has none, or that is of
// version 1 (no principal field), is refused.
func TestVerifyPrincipal(t *testing.T) {
	f := newFixture(t)
	v := f.verifier(t, VerifierConfig{})
	h, err := f.signer.SignAt(f.now, DefaultLifetime, subj, body, Claims{Actor: "mcp-human:alice@127.0.0.1", Principal: "token:bot", Role: api.RoleOperator})
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(subj, body, h)
	if err != nil || p.Actor != "mcp-human:alice@127.0.0.1" || p.Principal != "token:bot" {
		t.Fatalf("Verify = %+v, %v: want the label and the principal apart", p, err)
	}
	// Changed by someone without the key: the signature no longer holds.
	_, sig, _ := strings.Cut(h, ".")
	e, _, _, _ := parseHeader(h)
	e.principal = "token:alice"
	forged := b64.EncodeToString(e.appendPayload(nil)) + "." + sig
	if _, err := v.Verify(subj, body, forged); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a changed principal: %v, want ErrBadSignature", err)
	}
	// Signed without a principal (the key's holder, not the Signer).
	none := resign(t, h, f.ctlKey, func(e *envelope) { e.principal = ""; e.id[0]++ })
	if _, err := v.Verify(subj, body, none); !errors.Is(err, ErrMalformed) {
		t.Errorf("no principal: %v, want ErrMalformed", err)
	}
	// Version 1: the same fields without the principal, under "FMA1".
	old := []byte("FMA1")
	old = appendString(old, e.cert)
	old = appendString(old, e.subject)
	old = append(old, e.bodyHash[:]...)
	old = appendString(old, e.actor)
	old = appendString(old, e.role)
	old = binary.BigEndian.AppendUint64(old, uint64(e.issued))
	old = binary.BigEndian.AppendUint64(old, uint64(e.expires))
	e.id[1]++
	old = append(old, e.id[:]...)
	v1 := b64.EncodeToString(old) + "." + b64.EncodeToString(ed25519.Sign(f.ctlKey, old))
	if _, err := v.Verify(subj, body, v1); !errors.Is(err, ErrMalformed) {
		t.Errorf("a version 1 envelope: %v, want ErrMalformed", err)
	}
}

// TestVerifyRefusesBeforeStart (review #7): a request captured before a node
// restarted, replayed to the new node (a new Verifier, its replay cache empty), is
// refused; one issued within StartMargin before the start, or after, is accepted.
func TestVerifyRefusesBeforeStart(t *testing.T) {
	f := newFixture(t)
	clock := f.now
	now := func() time.Time { return clock }
	before := f.verifier(t, VerifierConfig{Now: now})
	captured, _ := f.signer.SignAt(clock, DefaultLifetime, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleAdmin})
	if _, err := before.Verify(subj, body, captured); err != nil {
		t.Fatalf("before the restart: %v", err)
	}
	if _, err := before.Verify(subj, body, captured); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replayed to the same node: %v, want ErrReplayed", err)
	}
	clock = clock.Add(5 * time.Second) // the node restarts; the envelope is still in its lifetime
	after := f.verifier(t, VerifierConfig{Now: now})
	_, err := after.Verify(subj, body, captured)
	if !errors.Is(err, ErrBeforeStart) || !strings.Contains(err.Error(), "retry") {
		t.Fatalf("replayed after the restart: %v, want ErrBeforeStart (retryable)", err)
	}
	for _, d := range []time.Duration{-StartMargin, 0, time.Second} {
		h, _ := f.signer.SignAt(clock.Add(d), DefaultLifetime, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleAdmin})
		if _, err := after.Verify(subj, body, h); err != nil {
			t.Errorf("issued %v from the start: %v", d, err)
		}
	}
	h, _ := f.signer.SignAt(clock.Add(-StartMargin-time.Millisecond), DefaultLifetime, subj, body, Claims{Actor: "a", Principal: "token:ci", Role: api.RoleAdmin})
	if _, err := after.Verify(subj, body, h); !errors.Is(err, ErrBeforeStart) {
		t.Errorf("issued just over StartMargin before the start: %v", err)
	}
}
