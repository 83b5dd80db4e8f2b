package trust

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// PEM block types of fleetmux's key files. A private key block holds the 32-byte
// ed25519 seed, a public key block the 32-byte public key.
const (
	PEMPrivateKey = "FLEETMUX ED25519 PRIVATE KEY"
	PEMPublicKey  = "FLEETMUX ED25519 PUBLIC KEY"
)

// ErrKeyFile is wrapped by every error about the content or the mode of a key file.
var ErrKeyFile = errors.New("trust: bad key file")

// maxKeyFile bounds what is read of a key file (a few PEM blocks).
const maxKeyFile = 64 << 10

// GenerateKey makes a new ed25519 key pair from crypto/rand.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("trust: generate key: %w", err)
	}
	return pub, priv, nil
}

// WritePrivateKey writes key to a new file at path, mode 0600. It never replaces
// an existing file nor follows a symbolic link (the error wraps os.ErrExist when
// the path exists).
func WritePrivateKey(path string, key ed25519.PrivateKey) error {
	if len(key) != ed25519.PrivateKeySize {
		return fmt.Errorf("%w: private key of %d bytes", ErrKeyFile, len(key))
	}
	return writeNew(path, 0o600, pem.EncodeToMemory(&pem.Block{Type: PEMPrivateKey, Bytes: key.Seed()}))
}

// ReadPrivateKey reads a private key written by WritePrivateKey. It refuses a file
// that is not a regular file or that its group or others may read or write.
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("trust: private key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("trust: private key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrKeyFile, path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %#o: a private key must be readable by its owner only (chmod 600)", ErrKeyFile, path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return nil, fmt.Errorf("trust: private key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != PEMPrivateKey || len(block.Bytes) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: %s holds no %q block", ErrKeyFile, path, PEMPrivateKey)
	}
	return ed25519.NewKeyFromSeed(block.Bytes), nil
}

// EncodePublicKey is the PEM encoding of key.
func EncodePublicKey(key ed25519.PublicKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: PEMPublicKey, Bytes: key})
}

// ParsePublicKeys reads every public key block in b (other PEM blocks are
// skipped); it fails when there is none or one is malformed.
func ParsePublicKeys(b []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != PEMPublicKey {
			continue
		}
		if len(block.Bytes) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: public key of %d bytes", ErrKeyFile, len(block.Bytes))
		}
		keys = append(keys, ed25519.PublicKey(block.Bytes))
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no %q block", ErrKeyFile, PEMPublicKey)
	}
	return keys, nil
}

// ParsePublicKey reads the first public key block in b.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	keys, err := ParsePublicKeys(b)
	if err != nil {
		return nil, err
	}
	return keys[0], nil
}

// WritePublicKey writes key to a new file at path, mode 0644 (never replacing one).
func WritePublicKey(path string, key ed25519.PublicKey) error {
	if len(key) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key of %d bytes", ErrKeyFile, len(key))
	}
	return writeNew(path, 0o644, EncodePublicKey(key))
}

// ReadPublicKey reads the first public key of a file written by WritePublicKey.
func ReadPublicKey(path string) (ed25519.PublicKey, error) {
	keys, err := ReadPublicKeys(path)
	if err != nil {
		return nil, err
	}
	return keys[0], nil
}

// ReadPublicKeys reads every public key in a file (a trust root file may list
// several roots, e.g. while one replaces another).
func ReadPublicKeys(path string) ([]ed25519.PublicKey, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, fmt.Errorf("trust: public key: %w", err)
	}
	keys, err := ParsePublicKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return keys, nil
}

// writeNew creates path (never replacing a file, never following a link) with
// perm and writes data to it; a file it could not finish is removed.
func writeNew(path string, perm os.FileMode, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return fmt.Errorf("trust: write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("trust: write %s: %w", path, err)
	}
	return nil
}

// readSmall reads a file of at most maxKeyFile bytes.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrKeyFile, path, maxKeyFile)
	}
	return b, nil
}
