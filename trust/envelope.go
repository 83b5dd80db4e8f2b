package trust

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
)

// The Fleetmux-Auth header (api.HeaderAuth) of a node request is
//
//	base64url(payload) "." base64url(signature)
//
// where signature is the controller key's ed25519 signature over the exact payload
// bytes, and payload is, in this order, with every string prefixed by its length
// as a big-endian uint16 (so no two envelopes share an encoding):
//
//	"FMA2"                    magic and version (never the start of a certificate's signed bytes)
//	string  cert              the controller's certificate (text form)
//	string  subject           the NATS subject the request is published to
//	[32]    sha256(body)      the request body's hash
//	string  actor             the label the client gave itself ("cli:bob@10.0.0.7", "mcp:…"): not an identity
//	string  principal         who the controller authenticated ("token:NAME", "ssh:FINGERPRINT"): never empty
//	string  role              api.RoleViewer, api.RoleOperator or api.RoleAdmin
//	int64   issued            Unix nanoseconds, big-endian
//	int64   expires           Unix nanoseconds, big-endian
//	[16]    request id        random, never accepted twice
//
// Nothing may follow the request id. Version 1 ("FMA1") had no principal and is
// refused: an envelope of one version never decodes as another.
const envMagic = "FMA2"

// Bounds of an envelope's fields.
const (
	maxSubjectLen   = 1024
	maxActorLen     = 512
	maxPrincipalLen = 512
	maxRoleLen      = 32
	requestIDLen    = 16
	// maxHeaderLen bounds the header's text: the largest payload in base64 plus a
	// signature.
	maxHeaderLen = (len(envMagic)+2*5+maxCertLen+maxSubjectLen+maxActorLen+maxPrincipalLen+maxRoleLen+sha256.Size+8+8+requestIDLen)*4/3 + 4 + 1 + 86
)

// envelope is a decoded payload.
type envelope struct {
	cert      string
	subject   string
	bodyHash  [sha256.Size]byte
	actor     string
	principal string
	role      string
	issued    int64 // Unix ns
	expires   int64 // Unix ns
	id        [requestIDLen]byte
}

// appendPayload appends e's encoding to b.
func (e *envelope) appendPayload(b []byte) []byte {
	b = append(b, envMagic...)
	b = appendString(b, e.cert)
	b = appendString(b, e.subject)
	b = append(b, e.bodyHash[:]...)
	b = appendString(b, e.actor)
	b = appendString(b, e.principal)
	b = appendString(b, e.role)
	b = binary.BigEndian.AppendUint64(b, uint64(e.issued))
	b = binary.BigEndian.AppendUint64(b, uint64(e.expires))
	return append(b, e.id[:]...)
}

func (e *envelope) payloadLen() int {
	return len(envMagic) + 2*5 + len(e.cert) + len(e.subject) + len(e.actor) + len(e.principal) + len(e.role) + sha256.Size + 8 + 8 + requestIDLen
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// parseHeader splits and decodes a header: the envelope, the signed payload and the
// signature. Every error wraps ErrMalformed.
func parseHeader(header string) (envelope, []byte, []byte, error) {
	if len(header) > maxHeaderLen {
		return envelope{}, nil, nil, fmt.Errorf("%w: header over %d bytes", ErrMalformed, maxHeaderLen)
	}
	encPayload, encSig, ok := strings.Cut(header, ".")
	if !ok {
		return envelope{}, nil, nil, fmt.Errorf("%w: no signature", ErrMalformed)
	}
	payload, err := b64.DecodeString(encPayload)
	if err != nil {
		return envelope{}, nil, nil, fmt.Errorf("%w: payload encoding", ErrMalformed)
	}
	sig, err := b64.DecodeString(encSig)
	if err != nil || len(sig) != 64 {
		return envelope{}, nil, nil, fmt.Errorf("%w: signature encoding", ErrMalformed)
	}
	e, err := decodePayload(payload)
	if err != nil {
		return envelope{}, nil, nil, err
	}
	return e, payload, sig, nil
}

// decodePayload decodes exactly one payload.
func decodePayload(p []byte) (envelope, error) {
	var e envelope
	r := reader{b: p}
	if magic := r.bytes(len(envMagic)); string(magic) != envMagic {
		return e, fmt.Errorf("%w: not a fleetmux envelope (or another version)", ErrMalformed)
	}
	e.cert = r.str(maxCertLen)
	e.subject = r.str(maxSubjectLen)
	copy(e.bodyHash[:], r.bytes(sha256.Size))
	e.actor = r.str(maxActorLen)
	e.principal = r.str(maxPrincipalLen)
	e.role = r.str(maxRoleLen)
	e.issued = int64(r.uint64())
	e.expires = int64(r.uint64())
	copy(e.id[:], r.bytes(requestIDLen))
	if r.err != "" {
		return envelope{}, fmt.Errorf("%w: %s", ErrMalformed, r.err)
	}
	if len(r.b) != 0 {
		return envelope{}, fmt.Errorf("%w: %d bytes after the request id", ErrMalformed, len(r.b))
	}
	return e, nil
}

// reader reads a payload; the first problem sticks in err and later reads return
// zero values.
type reader struct {
	b   []byte
	err string
}

func (r *reader) bytes(n int) []byte {
	if r.err != "" {
		return nil
	}
	if len(r.b) < n {
		r.err = "payload too short"
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) str(max int) string {
	lb := r.bytes(2)
	if lb == nil {
		return ""
	}
	n := int(binary.BigEndian.Uint16(lb))
	if n > max {
		r.err = fmt.Sprintf("a field of %d bytes (limit %d)", n, max)
		return ""
	}
	return string(r.bytes(n))
}

func (r *reader) uint64() uint64 {
	b := r.bytes(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
