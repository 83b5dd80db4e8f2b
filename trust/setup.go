package trust

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names in a keys directory (e.g. <data>/keys): the fleet root key pair made
// by InitRoot, and a controller's key and certificate made by EnrollController.
const (
	RootKeyFile        = "fleet.key"       // the root's private key (0600): keep it with the fleet's administrator
	RootPubFile        = "fleet.pub"       // the root's public key: every node's trust root
	ControllerKeyFile  = "controller.key"  // a controller's private key (0600)
	ControllerCertFile = "controller.cert" // its certificate, issued by the root
)

// DefaultCertValidity is how long EnrollController's certificates are valid.
const DefaultCertValidity = 365 * 24 * time.Hour

// InitRoot makes the fleet root key pair in dir (created 0700 if missing):
// RootKeyFile (0600) and RootPubFile. An existing key is kept (and its public key
// file written when missing), so InitRoot is idempotent. It returns the public key.
func InitRoot(dir string) (ed25519.PublicKey, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("trust: keys dir: %w", err)
	}
	keyPath, pubPath := filepath.Join(dir, RootKeyFile), filepath.Join(dir, RootPubFile)
	key, err := ReadPrivateKey(keyPath)
	if errors.Is(err, os.ErrNotExist) {
		var pub ed25519.PublicKey
		if pub, key, err = GenerateKey(); err != nil {
			return nil, err
		}
		if _, serr := os.Lstat(pubPath); serr == nil {
			// A public key without its private key belongs to some other root.
			return nil, fmt.Errorf("trust: %s exists without %s: move it away first", pubPath, keyPath)
		}
		if err = WritePrivateKey(keyPath, key); err != nil {
			return nil, err
		}
		return pub, WritePublicKey(pubPath, pub)
	}
	if err != nil {
		return nil, err
	}
	pub := key.Public().(ed25519.PublicKey)
	have, err := ReadPublicKey(pubPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return pub, WritePublicKey(pubPath, pub)
	case err != nil:
		return nil, err
	case !have.Equal(pub):
		return nil, fmt.Errorf("trust: %s is not the public key of %s", pubPath, keyPath)
	}
	return pub, nil
}

// EnrollController issues a certificate for controller name, signed by the root key
// in rootDir (RootKeyFile), valid for validFor (DefaultCertValidity when 0). The
// controller's key is outDir/ControllerKeyFile: kept when it exists, made (0600)
// when not; the certificate replaces outDir/ControllerCertFile. outDir is created
// 0700 if missing and may be rootDir (as in `fleetmux dev`).
func EnrollController(rootDir, outDir, name string, validFor time.Duration) error {
	if validFor <= 0 {
		validFor = DefaultCertValidity
	}
	root, err := ReadPrivateKey(filepath.Join(rootDir, RootKeyFile))
	if err != nil {
		return fmt.Errorf("%w (run fleetmux controller init first)", err)
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return fmt.Errorf("trust: controller keys dir: %w", err)
	}
	keyPath := filepath.Join(outDir, ControllerKeyFile)
	key, err := ReadPrivateKey(keyPath)
	if errors.Is(err, os.ErrNotExist) {
		if _, key, err = GenerateKey(); err != nil {
			return err
		}
		err = WritePrivateKey(keyPath, key)
	}
	if err != nil {
		return err
	}
	cert, err := IssueCert(root, name, key.Public().(ed25519.PublicKey), time.Now().Add(validFor))
	if err != nil {
		return err
	}
	return replaceFile(filepath.Join(outDir, ControllerCertFile), []byte(cert+"\n"))
}

// ControllerNeedsCert reports whether the certificate in dir is missing, unreadable,
// not for name, or expires within renewWithin: when `fleetmux dev` should call
// EnrollController again.
func ControllerNeedsCert(dir, name string, renewWithin time.Duration) bool {
	b, err := readSmall(filepath.Join(dir, ControllerCertFile))
	if err != nil {
		return true
	}
	c, err := ParseCert(strings.TrimSpace(string(b)))
	return err != nil || c.Name != name || time.Until(c.NotAfter) < renewWithin
}

// LoadSigner reads a controller's private key (0600) and certificate files.
func LoadSigner(keyPath, certPath string) (*Signer, error) {
	key, err := ReadPrivateKey(keyPath)
	if err != nil {
		return nil, err
	}
	b, err := readSmall(certPath)
	if err != nil {
		return nil, fmt.Errorf("trust: certificate: %w", err)
	}
	s, err := NewSigner(strings.TrimSpace(string(b)), key)
	if err != nil {
		return nil, fmt.Errorf("%w (%s, %s)", err, keyPath, certPath)
	}
	return s, nil
}

// LoadVerifier reads the trust roots in rootsPath (one or more public keys) into
// cfg.Roots and makes a Verifier.
func LoadVerifier(rootsPath string, cfg VerifierConfig) (*Verifier, error) {
	roots, err := ReadPublicKeys(rootsPath)
	if err != nil {
		return nil, err
	}
	cfg.Roots = append(cfg.Roots, roots...)
	return NewVerifier(cfg)
}

// replaceFile writes data to a temporary file next to path and renames it over
// path (mode 0644: a certificate is public).
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := writeNew(tmp, 0o644, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("trust: %w", err)
	}
	return nil
}
