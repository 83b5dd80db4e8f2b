// Package sshd is the controller's SSH front door: users log in with keys from an
// authorized_keys file (their role from its role= option), run the CLI's verbs
// that the Exec callback serves, get a menu of the fleet's sessions, or attach to
// one (ssh -t HOST NODE+ID). It reaches the fleet only through Fleet, which the
// controller satisfies; cmd/fleetmux wires the two.
package sshd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/internal/netcap"
	"golang.org/x/crypto/ssh"
)

// Defaults and limits.
const (
	DefaultListen = "127.0.0.1:2222"
	// DefaultMaxConns bounds concurrent logged-in SSH connections.
	DefaultMaxConns = 64
	// DefaultMaxConnsPerKey bounds one key's concurrent logged-in connections.
	DefaultMaxConnsPerKey = 8
	// DefaultMaxHandshakes bounds connections that have not logged in yet.
	DefaultMaxHandshakes = 32
	// DefaultHandshakeTimeout bounds a connection's handshake and login.
	DefaultHandshakeTimeout = 5 * time.Second
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

// ErrConfig is returned by Start for a config it cannot serve.
var ErrConfig = errors.New("sshd: bad config")

// Fleet is what the front door needs of the controller. Calls act as the
// principal of their context, made by ActAs; errors a user should see are
// *api.Error.
type Fleet interface {
	// ActAs returns a context that lives as long as the fleet does, in which actor
	// acts with role: the calls made with it are signed as theirs and checked
	// against the role.
	ActAs(actor, role string) context.Context
	// Sessions lists the sessions of one node (f.Node, "" for all) whose labels
	// (over their node's) carry every label in f.Labels.
	Sessions(ctx context.Context, f api.SessionFilter) (api.SessionList, error)
	Session(ctx context.Context, node, id string) (api.Session, error)
	// AttachInput types a person's keystrokes into a session (their writer lease
	// says they type in an attach).
	AttachInput(ctx context.Context, node, id, data string) error
	// TakeOver gives the session's writer lease to the caller; the writer that
	// held it is told.
	TakeOver(ctx context.Context, node, id string) (api.TakeOver, error)
	// WatchEvents calls fn with each event of the session from now until stop;
	// fn must not block.
	WatchEvents(node, id string, fn func(api.SessionEvent)) (stop func(), err error)
	Resize(ctx context.Context, node, id string, cols, rows int) (api.Session, error)
	// Redraw writes to w what an attaching terminal sees first (the session's
	// current screen) and returns the output offset live output continues from.
	Redraw(ctx context.Context, node, id string, w io.Writer) (int64, error)
	// Follow writes the session's output from offset from to w, gap-free, until
	// ctx is done, the session exits (after its last byte: exited, with its exit
	// code when known), the node goes down, or w fails. It blocks.
	Follow(ctx context.Context, node, id string, from int64, w io.Writer) (exitCode *int, exited bool, err error)
	// Audit records what a user did (or was refused) in the audit log.
	Audit(rec api.AuditRecord)
}

// Config configures Start.
type Config struct {
	// Listen is the SSH address. Default DefaultListen (loopback).
	Listen string
	// Listener, when set, is served instead of listening on Listen (Close closes
	// it).
	Listener net.Listener
	// HostKeyFile is the host key (OpenSSH PEM); generated (ed25519) when missing.
	// Required.
	HostKeyFile string
	// AuthorizedKeys is an authorized_keys file (OpenSSH format): one key per
	// line, its role given by the option role=ROLE (never by the comment; no
	// role means DefaultRole). The options from=, expiry-time=, cert-authority
	// and principals= are enforced, and a line with an option fleetmux does not
	// enforce is refused and logged (see keys.go). A cert-authority line
	// accepts user certificates it signed that are valid now and name one of its
	// principals. The file is read at each login, so edits apply at once.
	// Required.
	AuthorizedKeys string
	// DefaultRole is the role of keys that name none. Default api.RoleViewer.
	DefaultRole string
	// MaxConns bounds concurrent logged-in connections: viewers hold at most
	// half of them, viewers and operators all but an eighth (the rest are kept
	// for operators and admins). Default DefaultMaxConns.
	MaxConns int
	// MaxConnsPerKey bounds one key's concurrent logged-in connections (a
	// certificate's: its principal's with that key). Default
	// DefaultMaxConnsPerKey, at most MaxConns.
	MaxConnsPerKey int
	// MaxHandshakes bounds connections still in their handshake (not logged in),
	// which count apart from MaxConns: one address may hold half of them; when
	// they are all taken, a new connection ends the oldest handshake. Default
	// DefaultMaxHandshakes.
	MaxHandshakes int
	// HandshakeTimeout bounds a connection's handshake and login. Default
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Exec runs the CLI verbs. Required.
	Exec Exec
	// Fleet is the controller the front door acts on. Required.
	Fleet Fleet
	// Logger is the operator's log. Default slog.Default().
	Logger *slog.Logger
}

// Server is the controller's SSH front door.
type Server struct {
	fleet Fleet
	log   *slog.Logger
	cfg   Config
	conf  *ssh.ServerConfig
	ln    net.Listener
	keys  *keyFile

	mu      sync.Mutex             // guards conns, pending, logged, rate, refused, closed
	conns   map[net.Conn]struct{}  // every connection
	pending map[net.Conn]handshake // those not logged in yet
	logged  map[net.Conn]identity  // those logged in and let stay (loggedIn)
	rate    map[string]*bucket
	refused refusals
	closed  bool
	wg      sync.WaitGroup // accept loop and connection goroutines
}

// Start starts the SSH front door: it listens and serves until Close, which its
// caller owns (cmd closes it before the controller shuts down).
func Start(cfg Config) (*Server, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.HostKeyFile == "" || cfg.AuthorizedKeys == "" || cfg.Exec == nil || cfg.Fleet == nil {
		return nil, fmt.Errorf("%w: ssh needs a host key file, an authorized_keys file, Exec and Fleet", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultRole == "" {
		cfg.DefaultRole = api.RoleViewer
	}
	if !slices.Contains(api.Roles, cfg.DefaultRole) {
		return nil, fmt.Errorf("%w: ssh default role %q", ErrConfig, cfg.DefaultRole)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxConnsPerKey <= 0 {
		cfg.MaxConnsPerKey = DefaultMaxConnsPerKey
	}
	cfg.MaxConnsPerKey = min(cfg.MaxConnsPerKey, cfg.MaxConns)
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if _, err := os.Stat(cfg.AuthorizedKeys); err != nil {
		return nil, fmt.Errorf("%w: authorized keys: %w", ErrConfig, err)
	}
	signer, err := loadHostKey(cfg.HostKeyFile)
	if err != nil {
		return nil, err
	}
	s := &Server{fleet: cfg.Fleet, log: cfg.Logger, cfg: cfg, conns: map[net.Conn]struct{}{}, pending: map[net.Conn]handshake{}, logged: map[net.Conn]identity{}, rate: map[string]*bucket{},
		refused: refusals{tokens: refusalBurst}}
	s.keys = &keyFile{path: cfg.AuthorizedKeys, defaultRole: cfg.DefaultRole, logf: func(line int, why string) {
		cfg.Logger.Warn("ssh authorized_keys: line refused", "file", cfg.AuthorizedKeys, "line", line, "why", why)
	}}
	s.conf = &ssh.ServerConfig{
		PublicKeyCallback: s.authKey,
		AuthLogCallback:   s.authLog,
		ServerVersion:     "SSH-2.0-fleetmux",
		MaxAuthTries:      6,
		BannerCallback:    nil,
	}
	s.conf.AddHostKey(signer)
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("sshd: listen: %w", err)
		}
	}
	// The connections the admission below lets stay, and room for the ones it
	// refuses (closed at once): a bound on the descriptors SSH takes, whoever
	// connects. Accepts that fail for want of descriptors are retried, so the
	// front door serves again once they are back.
	s.ln = netcap.New(ln, netcap.Config{Name: "ssh", Logger: cfg.Logger, PerHost: -1,
		Max: cfg.MaxConns + cfg.MaxHandshakes + cfg.MaxHandshakes/2})
	s.wg.Add(1)
	go s.accept()
	cfg.Logger.Info("ssh serving", "addr", ln.Addr().String())
	return s, nil
}

// Addr is the address the SSH server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// HostKey is the server's public host key.
func (s *Server) HostKey() (ssh.PublicKey, error) {
	signer, err := loadHostKey(s.cfg.HostKeyFile)
	if err != nil {
		return nil, err
	}
	return signer.PublicKey(), nil
}

// Close stops accepting, closes every connection (attached sessions keep running
// on their nodes) and waits for the server's goroutines. Idempotent.
func (s *Server) Close() error {
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

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("ssh accept", "err", err)
			}
			return
		}
		if why := s.admit(nc); why != "" {
			s.log.Warn("ssh connection refused", "remote", nc.RemoteAddr().String(), "why", why)
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
func (s *Server) authKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	keys, err := s.keys.load()
	if err != nil {
		s.log.Error("ssh authorized keys", "err", err)
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
			return nil, fmt.Errorf("sshd: host key: %w", ferr)
		}
		if _, werr := f.Write(data); werr != nil {
			f.Close()
			return nil, fmt.Errorf("sshd: host key: %w", werr)
		}
		if cerr := f.Close(); cerr != nil {
			return nil, fmt.Errorf("sshd: host key: %w", cerr)
		}
	} else if err != nil {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("sshd: host key %s: %w", path, err)
	}
	return signer, nil
}
