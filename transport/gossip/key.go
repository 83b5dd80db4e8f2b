package gossip

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/transport/natsauth"
)

// KeyFile is the gossip key's file in a data dir's natsauth.AuthorityDir, written by
// `controller init` and `dev`, and next to the .creds by `enroll`: the key in hex,
// mode 0600.
const KeyFile = "gossip.key"

// ErrNoKey is returned by ReadKey for a missing key file.
var ErrNoKey = errors.New("no gossip key")

// KeyPath is where a data dir keeps its gossip key.
func KeyPath(dataDir string) string {
	return filepath.Join(dataDir, natsauth.AuthorityDir, KeyFile)
}

// ParseKey decodes a gossip key given in hex (16, 24 or 32 bytes).
func ParseKey(s string) ([]byte, error) {
	key, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: gossip key: not hex: %v", ErrConfig, err)
	}
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	}
	return nil, fmt.Errorf("%w: gossip key is %d bytes; want 16, 24 or 32 (openssl rand -hex 32)", ErrConfig, len(key))
}

// ReadKey reads the key file path: the user's, readable by them alone, never
// through a link (datadir.CheckPrivate). A missing file is ErrNoKey.
func ReadKey(path string) ([]byte, error) {
	if err := datadir.CheckPrivate(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNoKey, path)
		}
		return nil, fmt.Errorf("transport: gossip key: %w", err)
	}
	b, err := datadir.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("transport: gossip key: %w", err)
	}
	key, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return key, nil
}

// WriteKey writes key (hex, 0600) to a new file path; it never replaces one.
func WriteKey(path string, key []byte) error {
	f, err := datadir.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("transport: gossip key: %w", err)
	}
	_, err = f.WriteString(hex.EncodeToString(key) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("transport: gossip key: %w", err)
	}
	return nil
}

// EnsureKey reads the key of a data dir (KeyPath), making a new random
// one (32 bytes) when it has none.
func EnsureKey(dataDir string) ([]byte, error) {
	path := KeyPath(dataDir)
	key, err := ReadKey(path)
	if !errors.Is(err, ErrNoKey) {
		return key, err
	}
	if err := datadir.Mkdir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("transport: gossip key: %w", err)
	}
	if err := WriteKey(path, key); err != nil {
		if errors.Is(err, syscall.EEXIST) { // made by another process meanwhile
			return ReadKey(path)
		}
		return nil, err
	}
	return key, nil
}
