package natsauth

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/fleetmux/fleetmux/internal/datadir"
)

// Files of an authority under its directory (`fleetmux controller init --data DIR`
// makes DIR/keys/...). The seeds and the CA key are 0600; the CA certificate is
// public.
const (
	AuthorityDir   = "keys"
	operatorFile   = "nats-operator.nk"
	accountFile    = "nats-account.nk"
	systemFile     = "nats-system.nk"
	CACertFile     = "nats-ca.crt"
	caKeyFile      = "nats-ca.key"
	accountName    = "fleetmux"
	sysAccountName = "SYS"
)

// Advisory subjects in the fleet account: the server's connect and disconnect
// events of the account's clients, imported from the system account.
const (
	AdvisoryConnect    = "$FLEETMUX.CONNECT"
	AdvisoryDisconnect = "$FLEETMUX.DISCONNECT"
)

// MaxControlLine is the embedded server's max_control_line; a server of one's own
// that fleetmux users connect to needs at least this much.
const MaxControlLine = 16 << 10

// Sentinel errors of authorities.
var (
	// ErrInitialized: the directory already holds an authority (init without force).
	ErrInitialized = errors.New("natsauth: already initialized")
	// ErrNoAuthority: the directory holds no authority (run init first).
	ErrNoAuthority = errors.New("natsauth: no nats authority (run fleetmux controller init)")
)

// Authority is a fleet's NATS trust root: the operator, the fleet account that every
// fleetmux user belongs to, the system account, and the CA that signs the servers'
// TLS certificates. It issues user credentials (Issue) and configures embedded
// servers (ServerConfig.Auth). Its methods are safe for concurrent use.
type Authority struct {
	operator, account, system nkeys.KeyPair
	ca                        *x509.Certificate
	caKey                     *ecdsa.PrivateKey
	caPEM                     []byte
}

// NewAuthority makes new keys and a new CA, in memory.
func NewAuthority() (*Authority, error) {
	a := &Authority{}
	var err error
	if a.operator, err = nkeys.CreateOperator(); err != nil {
		return nil, fmt.Errorf("natsauth: operator key: %w", err)
	}
	if a.account, err = nkeys.CreateAccount(); err != nil {
		return nil, fmt.Errorf("natsauth: account key: %w", err)
	}
	if a.system, err = nkeys.CreateAccount(); err != nil {
		return nil, fmt.Errorf("natsauth: system account key: %w", err)
	}
	if a.ca, a.caKey, a.caPEM, err = newCA(); err != nil {
		return nil, err
	}
	return a, nil
}

// InitAuthority makes a new authority and writes it under dir/keys. It refuses
// (ErrInitialized) when one is there already, unless force (which replaces it:
// every credential issued before stops working).
func InitAuthority(dir string, force bool) (*Authority, error) {
	kd := filepath.Join(dir, AuthorityDir)
	if _, err := os.Stat(filepath.Join(kd, operatorFile)); err == nil && !force {
		return nil, fmt.Errorf("%w: %s (use --force to replace it and invalidate every credential)", ErrInitialized, kd)
	}
	a, err := NewAuthority()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("natsauth: %w", err)
	}
	if err := datadir.Mkdir(kd); err != nil {
		return nil, fmt.Errorf("natsauth: %w", err)
	}
	keyPEM, err := marshalKey(a.caKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{caKeyFile, keyPEM, 0o600},
		{CACertFile, a.caPEM, 0o644},
		{systemFile, seedOf(a.system), 0o600},
		{accountFile, seedOf(a.account), 0o600},
		{operatorFile, seedOf(a.operator), 0o600}, // last: its presence means complete
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(kd, f.name), f.data, f.mode); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// LoadAuthority reads the authority under dir/keys (ErrNoAuthority when there is
// none).
func LoadAuthority(dir string) (*Authority, error) {
	kd := filepath.Join(dir, AuthorityDir)
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(kd, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNoAuthority, kd)
		}
		if err != nil {
			return nil, fmt.Errorf("natsauth: %w", err)
		}
		return b, nil
	}
	a := &Authority{}
	for _, k := range []struct {
		file   string
		kp     *nkeys.KeyPair
		prefix nkeys.PrefixByte
	}{{operatorFile, &a.operator, nkeys.PrefixByteOperator}, {accountFile, &a.account, nkeys.PrefixByteAccount}, {systemFile, &a.system, nkeys.PrefixByteAccount}} {
		b, err := read(k.file)
		if err != nil {
			return nil, err
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		if err != nil {
			return nil, fmt.Errorf("natsauth: %s: %w", k.file, err)
		}
		if pre, _, err := nkeys.DecodeSeed([]byte(strings.TrimSpace(string(b)))); err != nil || pre != k.prefix {
			return nil, fmt.Errorf("natsauth: %s: not the right kind of key", k.file)
		}
		*k.kp = kp
	}
	certPEM, err := read(CACertFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read(caKeyFile)
	if err != nil {
		return nil, err
	}
	if a.ca, a.caKey, err = parseCA(certPEM, keyPEM); err != nil {
		return nil, err
	}
	a.caPEM = certPEM
	return a, nil
}

// OpenAuthority loads the authority under dir, or initializes one there when there
// is none (fleetmux dev, a node with its own embedded server).
func OpenAuthority(dir string) (*Authority, error) {
	a, err := LoadAuthority(dir)
	if errors.Is(err, ErrNoAuthority) {
		return InitAuthority(dir, false)
	}
	return a, err
}

// CA is the PEM certificate of the CA that signs the servers' TLS certificates.
func (a *Authority) CA() []byte { return append([]byte(nil), a.caPEM...) }

// Account is the fleet account's public key.
func (a *Authority) Account() string { pub, _ := a.account.PublicKey(); return pub }

// SystemAccount is the system account's public key.
func (a *Authority) SystemAccount() string { pub, _ := a.system.PublicKey(); return pub }

// OperatorJWT is the operator's self-signed JWT (with the system account).
func (a *Authority) OperatorJWT() (string, error) {
	claims, err := a.operatorClaims()
	if err != nil {
		return "", err
	}
	return claims.Encode(a.operator)
}

func (a *Authority) operatorClaims() (*jwt.OperatorClaims, error) {
	pub, err := a.operator.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("natsauth: operator: %w", err)
	}
	oc := jwt.NewOperatorClaims(pub)
	oc.Name = "fleetmux"
	oc.SystemAccount = a.SystemAccount()
	return oc, nil
}

// Account limits of JetStream: how many streams the fleet account keeps (three
// streams and three KV buckets today) and how many consumers each stream holds at
// once, so that no identity creates them without bound.
const (
	accountMaxStreams   = 32
	accountMaxConsumers = 1024
)

// AccountJWT is the fleet account's JWT, signed by the operator: JetStream on
// with storage unlimited but bounded streams and consumers (accountMaxStreams,
// accountMaxConsumers per stream), and the connect/disconnect advisories of its own clients imported
// from the system account (AdvisoryConnect, AdvisoryDisconnect).
func (a *Authority) AccountJWT() (string, error) {
	ac := jwt.NewAccountClaims(a.Account())
	ac.Name = accountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: accountMaxStreams, Consumer: accountMaxConsumers, MaxAckPending: -1, MemoryMaxStreamBytes: -1, DiskMaxStreamBytes: -1}
	for local, event := range map[string]string{AdvisoryConnect: "CONNECT", AdvisoryDisconnect: "DISCONNECT"} {
		ac.Imports.Add(&jwt.Import{
			Name: "advisory " + strings.ToLower(event), Type: jwt.Stream, Account: a.SystemAccount(),
			Subject: jwt.Subject("$SYS.ACCOUNT." + a.Account() + "." + event), LocalSubject: jwt.RenamingSubject(local),
		})
	}
	return ac.Encode(a.operator)
}

// SystemAccountJWT is the system account's JWT, signed by the operator; it exports
// the fleet account's connect/disconnect events to it.
func (a *Authority) SystemAccountJWT() (string, error) {
	ac := jwt.NewAccountClaims(a.SystemAccount())
	ac.Name = sysAccountName
	for _, event := range []string{"CONNECT", "DISCONNECT"} {
		ac.Exports.Add(&jwt.Export{
			Name: "fleet " + strings.ToLower(event), Type: jwt.Stream,
			Subject: jwt.Subject("$SYS.ACCOUNT." + a.Account() + "." + event),
		})
	}
	return ac.Encode(a.operator)
}

// Issue makes credentials for id: a user JWT of the fleet account with
// id.Permissions, its nkey seed, and the CA certificate.
func (a *Authority) Issue(id Identity) (*Creds, error) {
	perms, err := id.Permissions()
	if err != nil {
		return nil, err
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("natsauth: user key: %w", err)
	}
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = id.UserName()
	uc.Permissions = perms
	uj, err := uc.Encode(a.account)
	if err != nil {
		return nil, fmt.Errorf("natsauth: user jwt: %w", err)
	}
	seed, err := user.Seed()
	if err != nil {
		return nil, fmt.Errorf("natsauth: user seed: %w", err)
	}
	return &Creds{JWT: uj, Seed: seed, CA: a.CA()}, nil
}

func seedOf(kp nkeys.KeyPair) []byte {
	s, _ := kp.Seed()
	return append(s, '\n')
}

// writeFile writes data to path with mode (also when the file existed with
// another mode), through a temporary file so a reader never sees half of it.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := datadir.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("natsauth: %w", err)
	}
	return nil
}

// Configure puts the server in operator mode with TLS (ServerConfig.Auth): the
// operator is trusted, both accounts are preloaded into a memory resolver, the
// system account is set, and a certificate for hosts is issued from the CA, for
// clients (TLS required of every one) and for routes (mutual TLS).
func (a *Authority) Configure(opts *server.Options, hosts []string) error {
	opJWT, err := a.OperatorJWT()
	if err != nil {
		return fmt.Errorf("natsauth: operator jwt: %w", err)
	}
	oc, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		return fmt.Errorf("natsauth: operator jwt: %w", err)
	}
	accJWT, err := a.AccountJWT()
	if err != nil {
		return fmt.Errorf("natsauth: account jwt: %w", err)
	}
	sysJWT, err := a.SystemAccountJWT()
	if err != nil {
		return fmt.Errorf("natsauth: system account jwt: %w", err)
	}
	res := &server.MemAccResolver{}
	if err := res.Store(a.Account(), accJWT); err != nil {
		return err
	}
	if err := res.Store(a.SystemAccount(), sysJWT); err != nil {
		return err
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{oc}
	opts.AccountResolver = res
	opts.SystemAccount = a.SystemAccount()
	// A controller's user JWT (its permissions) is about 4 KiB: the CONNECT line
	// that carries it needs more than nats-server's default 4 KiB.
	opts.MaxControlLine = MaxControlLine

	tlsCfg, pool, err := a.serverTLS(hosts)
	if err != nil {
		return err
	}
	opts.TLSConfig = tlsCfg
	opts.TLS = true
	opts.TLSTimeout = 2
	if opts.Cluster.Port != 0 {
		route := tlsCfg.Clone()
		route.ClientAuth = tls.RequireAndVerifyClientCert
		route.ClientCAs = pool
		route.RootCAs = pool
		opts.Cluster.TLSConfig = route
		opts.Cluster.TLSTimeout = 2
	}
	return nil
}

// ServerConf is a nats-server configuration fragment that makes a server of one's
// own trust this authority: the operator, both accounts preloaded into a memory
// resolver, and a control line long enough for fleetmux's user JWTs. TLS and
// listeners are the server owner's business.
func (a *Authority) ServerConf() (string, error) {
	op, err := a.OperatorJWT()
	if err != nil {
		return "", err
	}
	acc, err := a.AccountJWT()
	if err != nil {
		return "", err
	}
	sys, err := a.SystemAccountJWT()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("# fleetmux: trust the fleet's operator and preload its accounts\n"+
		"operator: %s\nsystem_account: %s\nresolver: MEMORY\nresolver_preload: {\n  %s: %s\n  %s: %s\n}\nmax_control_line: %d\n",
		op, a.SystemAccount(), a.Account(), acc, a.SystemAccount(), sys, MaxControlLine), nil
}
