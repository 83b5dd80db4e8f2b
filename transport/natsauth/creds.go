package natsauth

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// ErrCreds: a credentials file is malformed.
var ErrCreds = errors.New("natsauth: bad nats credentials")

// Creds are a NATS user's credentials: the user JWT, its nkey seed, and the CA
// certificate that verifies the servers (PEM). On disk (Marshal) it is the standard
// NATS .creds format, which nats.go, the nats CLI and nats.js read as they are,
// followed by the CA as a PEM CERTIFICATE block, which they ignore (and which the
// nats CLI's --tlsca and nats.go's RootCAs accept from the same file).
type Creds struct {
	JWT  string
	Seed []byte
	CA   []byte // PEM; may be empty
}

// Marshal encodes the credentials as a .creds file.
func (c *Creds) Marshal() ([]byte, error) {
	b, err := jwt.FormatUserConfig(c.JWT, c.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	if len(c.CA) > 0 {
		b = append(b, "\n# The CA of the fleet's NATS servers (TLS):\n"...)
		b = append(b, c.CA...)
	}
	return b, nil
}

// Claims decodes the user JWT.
func (c *Creds) Claims() (*jwt.UserClaims, error) {
	uc, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	return uc, nil
}

// ParseCreds reads a .creds file: the decorated user JWT and seed, and any PEM
// CERTIFICATE blocks after them (the CA).
func ParseCreds(data []byte) (*Creds, error) {
	j, err := nkeys.ParseDecoratedJWT(data)
	if err != nil {
		return nil, fmt.Errorf("%w: jwt: %w", ErrCreds, err)
	}
	if j == string(data) { // no decoration found: not a creds file
		return nil, fmt.Errorf("%w: no user jwt", ErrCreds)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	if err != nil {
		return nil, fmt.Errorf("%w: seed: %w", ErrCreds, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("%w: seed: %w", ErrCreds, err)
	}
	c := &Creds{JWT: j, Seed: seed}
	uc, err := c.Claims()
	if err != nil {
		return nil, err
	}
	if pub, _ := kp.PublicKey(); pub != uc.Subject {
		return nil, fmt.Errorf("%w: the seed does not belong to the jwt", ErrCreds)
	}
	// The NATS decorations are not PEM (their END lines have six dashes), so look
	// for certificate blocks from the first one on.
	rest := data
	if i := bytes.Index(rest, []byte("-----BEGIN CERTIFICATE-----")); i >= 0 {
		rest = rest[i:]
		for {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			if blk.Type == "CERTIFICATE" {
				c.CA = append(c.CA, pem.EncodeToMemory(blk)...)
			}
		}
	}
	return c, nil
}

// ReadCreds reads and parses a .creds file.
func ReadCreds(path string) (*Creds, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("natsauth: %w", err)
	}
	c, err := ParseCreds(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// WriteCreds writes a .creds file with mode 0600.
func WriteCreds(path string, c *Creds) error {
	b, err := c.Marshal()
	if err != nil {
		return err
	}
	return writeFile(path, b, 0o600)
}
