package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"golang.org/x/crypto/ssh"
)

// SSH defaults and limits.
const (
	DefaultSSHListen = "127.0.0.1:2222"
	// DefaultSSHMaxConns bounds concurrent logged-in SSH connections.
	DefaultSSHMaxConns = 64
	// DefaultSSHMaxHandshakes bounds connections that have not logged in yet.
	DefaultSSHMaxHandshakes = 32
	// DefaultSSHHandshakeTimeout bounds a connection's handshake and login.
	DefaultSSHHandshakeTimeout = 5 * time.Second
	// sshRateBurst connections per address are allowed at once, refilled at one per
	// sshRateEvery.
	sshRateBurst = 20
	sshRateEvery = 200 * time.Millisecond
)

// Exec runs one CLI verb for an SSH user: args as typed after `ssh controller`,
// the user's role and actor (for the audit), stdin/stdout/stderr of the SSH
// channel. It returns the exit status. cmd wires in the CLI itself, so a verb over
// SSH prints and exits exactly as it does in a terminal.
type Exec func(ctx context.Context, args []string, role, actor string, stdin io.Reader, stdout, stderr io.Writer) int

// SSHConfig configures StartSSH.
type SSHConfig struct {
	// Listen is the SSH address. Default DefaultSSHListen (loopback).
	Listen string
	// HostKeyFile is the host key (OpenSSH PEM); generated (ed25519) when missing.
	// Required.
	HostKeyFile string
	// AuthorizedKeys is an authorized_keys file (OpenSSH format): one key per
	// line, its role given by the option role=ROLE (never by the comment; no
	// role means DefaultRole). The options from=, expiry-time=, cert-authority
	// and principals= are enforced, and a line with an option fleetmux does not
	// enforce is refused and logged (see sshkeys.go). A cert-authority line
	// accepts user certificates it signed that are valid now and name one of its
	// principals. The file is read at each login, so edits apply at once.
	// Required.
	AuthorizedKeys string
	// DefaultRole is the role of keys that name none. Default api.RoleViewer.
	DefaultRole string
	// MaxConns bounds concurrent logged-in connections. Default
	// DefaultSSHMaxConns.
	MaxConns int
	// MaxHandshakes bounds connections still in their handshake (not logged in),
	// which count apart from MaxConns: one address may hold half of them; when
	// they are all taken, a new connection ends the oldest handshake. Default
	// DefaultSSHMaxHandshakes.
	MaxHandshakes int
	// HandshakeTimeout bounds a connection's handshake and login. Default
	// DefaultSSHHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Exec runs the CLI verbs. Required.
	Exec Exec
}

// SSHServer is the controller's SSH front door.
type SSHServer struct {
	c    *Controller
	cfg  SSHConfig
	conf *ssh.ServerConfig
	ln   net.Listener
	keys *keyFile

	mu      sync.Mutex             // guards conns, pending, rate, refused, closed
	conns   map[net.Conn]struct{}  // every connection
	pending map[net.Conn]handshake // those not logged in yet
	rate    map[string]*bucket
	refused refusals
	closed  bool
	wg      sync.WaitGroup // accept loop and connection goroutines
}

// StartSSH starts the SSH front door of the controller; Close (or the controller's
// Shutdown, through the caller) stops it.
func (c *Controller) StartSSH(cfg SSHConfig) (*SSHServer, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultSSHListen
	}
	if cfg.HostKeyFile == "" || cfg.AuthorizedKeys == "" || cfg.Exec == nil {
		return nil, fmt.Errorf("%w: ssh needs a host key file, an authorized_keys file and Exec", ErrConfig)
	}
	if cfg.DefaultRole == "" {
		cfg.DefaultRole = api.RoleViewer
	}
	if !validRole(cfg.DefaultRole) {
		return nil, fmt.Errorf("%w: ssh default role %q", ErrConfig, cfg.DefaultRole)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultSSHMaxConns
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = DefaultSSHMaxHandshakes
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultSSHHandshakeTimeout
	}
	if _, err := os.Stat(cfg.AuthorizedKeys); err != nil {
		return nil, fmt.Errorf("%w: authorized keys: %w", ErrConfig, err)
	}
	signer, err := loadHostKey(cfg.HostKeyFile)
	if err != nil {
		return nil, err
	}
	s := &SSHServer{c: c, cfg: cfg, conns: map[net.Conn]struct{}{}, pending: map[net.Conn]handshake{}, rate: map[string]*bucket{},
		refused: refusals{tokens: refusalBurst}}
	s.keys = &keyFile{path: cfg.AuthorizedKeys, defaultRole: cfg.DefaultRole, logf: func(line int, why string) {
		c.log.Warn("ssh authorized_keys: line refused", "file", cfg.AuthorizedKeys, "line", line, "why", why)
	}}
	s.conf = &ssh.ServerConfig{
		PublicKeyCallback: s.authKey,
		AuthLogCallback:   s.authLog,
		ServerVersion:     "SSH-2.0-fleetmux",
		MaxAuthTries:      6,
		BannerCallback:    nil,
	}
	s.conf.AddHostKey(signer)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("controller: ssh listen: %w", err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.accept()
	c.log.Info("ssh serving", "addr", ln.Addr().String())
	return s, nil
}

// Addr is the address the SSH server listens on.
func (s *SSHServer) Addr() string { return s.ln.Addr().String() }

// HostKey is the server's public host key.
func (s *SSHServer) HostKey() (ssh.PublicKey, error) {
	signer, err := loadHostKey(s.cfg.HostKeyFile)
	if err != nil {
		return nil, err
	}
	return signer.PublicKey(), nil
}

// Close stops accepting, closes every connection (attached sessions keep running
// on their nodes) and waits for the server's goroutines. Idempotent.
func (s *SSHServer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	s.flushRefusals()
	return err
}

func (s *SSHServer) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.c.log.Warn("ssh accept", "err", err)
			}
			return
		}
		if why := s.admit(nc); why != "" {
			s.c.log.Warn("ssh connection refused", "remote", nc.RemoteAddr().String(), "why", why)
			nc.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.forget(nc)
			s.serveConn(nc)
		}()
	}
}

// identity is an authenticated SSH user: the key's fingerprint and role.
type identity struct {
	fingerprint string
	role        string
	principal   string // for certificates
}

func (id identity) actor() string {
	if id.principal != "" {
		return "ssh:" + id.principal + ":" + id.fingerprint
	}
	return "ssh:" + id.fingerprint
}

// authKey checks a public key (or certificate) against the authorized keys file.
func (s *SSHServer) authKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	keys, err := s.keys.load()
	if err != nil {
		s.c.log.Error("ssh authorized keys", "err", err)
		return nil, errors.New("no authorized keys")
	}
	id, err := keys.check(key, remoteAddr(meta.RemoteAddr()), time.Now())
	if err != nil {
		who := ssh.FingerprintSHA256(key)
		if cert, ok := key.(*ssh.Certificate); ok { // its KeyId is anyone's text: the signature is not checked yet
			who = ssh.FingerprintSHA256(cert.SignatureKey) + " cert " + untrusted(cert.KeyId)
		}
		s.refusal(api.AuditRecord{Actor: "ssh:" + who, Action: "ssh login", Detail: untrusted(meta.User()) + " from " + meta.RemoteAddr().String(), Result: "refused", Error: err.Error()})
		return nil, err
	}
	return &ssh.Permissions{Extensions: map[string]string{"fp": id.fingerprint, "role": id.role, "principal": id.principal}}, nil
}

func validRole(r string) bool {
	return r == api.RoleViewer || r == api.RoleOperator || r == api.RoleAdmin
}

// loadHostKey reads the host key, generating an ed25519 key (0600) when missing.
// A key that is a link, is not the user's, or that others may read is refused.
func loadHostKey(path string) (ssh.Signer, error) {
	err := datadir.CheckPrivate(path)
	var data []byte
	if err == nil {
		data, err = datadir.ReadFile(path)
	}
	if errors.Is(err, os.ErrNotExist) {
		_, priv, gerr := ed25519.GenerateKey(rand.Reader)
		if gerr != nil {
			return nil, gerr
		}
		block, merr := ssh.MarshalPrivateKey(priv, "fleetmux host key")
		if merr != nil {
			return nil, merr
		}
		data = pem.EncodeToMemory(block)
		f, ferr := datadir.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if ferr != nil {
			return nil, fmt.Errorf("controller: ssh host key: %w", ferr)
		}
		if _, werr := f.Write(data); werr != nil {
			f.Close()
			return nil, fmt.Errorf("controller: ssh host key: %w", werr)
		}
		if cerr := f.Close(); cerr != nil {
			return nil, fmt.Errorf("controller: ssh host key: %w", cerr)
		}
	} else if err != nil {
		return nil, fmt.Errorf("controller: ssh host key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("controller: ssh host key %s: %w", path, err)
	}
	return signer, nil
}
