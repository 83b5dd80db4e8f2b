package trust

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// A controller certificate says that the fleet root vouches for a controller's
// public key under a name until a time. Its text form is
//
//	base64url(JSON{"v":1,"name","key","nbf","exp"}) "." base64url(signature)
//
// where the signature is the root key's ed25519 signature over certDomain followed
// by the decoded JSON bytes (the exact bytes, so no canonical form is needed);
// "key" is the standard base64 of the 32-byte public key, "nbf" and "exp" are Unix
// seconds.
const certDomain = "fleetmux controller certificate v1\x00"

// certVersion is the "v" of the certificates this package issues and accepts.
const certVersion = 1

// maxCertLen bounds a certificate's text (a name of ≤ 63 bytes makes ~250).
const maxCertLen = 1024

// Cert is a parsed controller certificate.
type Cert struct {
	Name      string            // the controller's name (api.ValidName)
	Key       ed25519.PublicKey // the controller's public key
	NotBefore time.Time
	NotAfter  time.Time
}

type certJSON struct {
	V    int    `json:"v"`
	Name string `json:"name"`
	Key  string `json:"key"`
	NBF  int64  `json:"nbf"`
	Exp  int64  `json:"exp"`
}

// IssueCert signs a certificate for a controller's key with the fleet root key,
// valid from now until notAfter.
func IssueCert(root ed25519.PrivateKey, name string, key ed25519.PublicKey, notAfter time.Time) (string, error) {
	return issueCert(root, name, key, time.Now(), notAfter)
}

func issueCert(root ed25519.PrivateKey, name string, key ed25519.PublicKey, notBefore, notAfter time.Time) (string, error) {
	if len(root) != ed25519.PrivateKeySize {
		return "", fmt.Errorf("trust: issue certificate: root key of %d bytes", len(root))
	}
	if len(key) != ed25519.PublicKeySize {
		return "", fmt.Errorf("trust: issue certificate: public key of %d bytes", len(key))
	}
	if err := api.ValidName(name); err != nil {
		return "", fmt.Errorf("trust: issue certificate: controller %w", err)
	}
	if !notAfter.After(notBefore) {
		return "", errors.New("trust: issue certificate: it would expire before it is valid")
	}
	body, err := json.Marshal(certJSON{V: certVersion, Name: name, Key: base64.StdEncoding.EncodeToString(key), NBF: notBefore.Unix(), Exp: notAfter.Unix()})
	if err != nil {
		return "", fmt.Errorf("trust: issue certificate: %w", err)
	}
	sig := ed25519.Sign(root, certMessage(body))
	return b64.EncodeToString(body) + "." + b64.EncodeToString(sig), nil
}

var b64 = base64.RawURLEncoding

func certMessage(body []byte) []byte {
	msg := make([]byte, 0, len(certDomain)+len(body))
	return append(append(msg, certDomain...), body...)
}

// ParseCert decodes a certificate WITHOUT checking its signature: it is for showing
// what a certificate says (its name, its expiry). Verifier checks signatures.
func ParseCert(cert string) (Cert, error) {
	c, _, _, err := splitCert(cert)
	return c, err
}

// splitCert parses a certificate's text: its content, the signed bytes and the
// signature. Errors wrap ErrMalformed.
func splitCert(cert string) (Cert, []byte, []byte, error) {
	if len(cert) > maxCertLen {
		return Cert{}, nil, nil, fmt.Errorf("%w: certificate over %d bytes", ErrMalformed, maxCertLen)
	}
	enc, encSig, ok := strings.Cut(cert, ".")
	if !ok {
		return Cert{}, nil, nil, fmt.Errorf("%w: certificate has no signature", ErrMalformed)
	}
	body, err := b64.DecodeString(enc)
	if err != nil {
		return Cert{}, nil, nil, fmt.Errorf("%w: certificate encoding", ErrMalformed)
	}
	sig, err := b64.DecodeString(encSig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return Cert{}, nil, nil, fmt.Errorf("%w: certificate signature encoding", ErrMalformed)
	}
	var cj certJSON
	if err := json.Unmarshal(body, &cj); err != nil {
		return Cert{}, nil, nil, fmt.Errorf("%w: certificate content", ErrMalformed)
	}
	if cj.V != certVersion {
		return Cert{}, nil, nil, fmt.Errorf("%w: certificate version %d (want %d)", ErrMalformed, cj.V, certVersion)
	}
	key, err := base64.StdEncoding.DecodeString(cj.Key)
	if err != nil || len(key) != ed25519.PublicKeySize {
		return Cert{}, nil, nil, fmt.Errorf("%w: certificate key", ErrMalformed)
	}
	if api.ValidName(cj.Name) != nil {
		return Cert{}, nil, nil, fmt.Errorf("%w: certificate name", ErrMalformed)
	}
	c := Cert{Name: cj.Name, Key: key, NotBefore: time.Unix(cj.NBF, 0), NotAfter: time.Unix(cj.Exp, 0)}
	return c, body, sig, nil
}
