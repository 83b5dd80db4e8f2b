// Package holder keeps the PTYs of a node's sessions in a small process of its own
// (`fleetmux holder`), so the sessions outlive the node agent: its crash, restart
// or upgrade. The holder owns the PTY master fds, the children (it is their parent
// and reaps them) and a raw output ring per session; the agent (session's holder
// backend) does everything else and reattaches after a restart. See proto.go for the
// protocol and README "Sessions that outlive the agent" for what survives what.
//
// Who reads the master: the holder, only. The agent gets the output from the
// holder's ring (an attach stream from an offset), and gets a copy of the master fd
// (SCM_RIGHTS) for the ioctls it needs (foreground process group, termios, queued
// bytes, window size) and for writing input, which the kernel serializes; it never
// reads it.
package holder

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/internal/reclaim"
)

// SocketName is the holder's socket in its directory.
const SocketName = "holder.sock"

// KeyName is the file in the holder's directory with the key an agent shows in
// its hello (proto.go): whoever cannot read the directory cannot use the holder.
const KeyName = "holder.key"

// maxMeta bounds an agent's description of a session.
const maxMeta = 64 << 10

// DefaultIdleExit is Config.IdleExit's default.
const DefaultIdleExit = 10 * time.Second

// closeGrace is how long a closed session's program has after SIGHUP before SIGKILL.
const closeGrace = 2 * time.Second

// settleAfter is how long the holder is quiet (no request, attach or disconnect)
// before it returns the memory a burst left behind to the OS (package reclaim). An
// idle holder's live heap is small (a few KiB a session), but the garbage of a
// burst of spawns and attaches stays resident up to the runtime's heap goal, a few
// MiB, for minutes; a GC of a heap that small costs about a millisecond.
const settleAfter = time.Second

// Config configures a Server.
type Config struct {
	// Dir is the holder's directory (created 0700; typically DATA/holder); the
	// socket is Dir/holder.sock (0600). Required.
	Dir string
	// Version is the binary's version, told to agents (logs only).
	Version string
	// Logger receives operational logs; default slog.Default().
	Logger *slog.Logger
	// IdleExit is how long the holder may hold no session with no agent connected
	// before Serve returns (a holder with nothing to hold does not linger: the next
	// agent launches another). It counts from Listen and from each moment the last
	// session and the last connection are gone. Zero means DefaultIdleExit; negative,
	// never.
	IdleExit time.Duration
}

// Server is a running holder. Its sessions live until they exit and an agent closes
// them, or until Close.
type Server struct {
	cfg  Config
	log  *slog.Logger
	ln   *net.UnixListener
	path string
	key  string // what an agent's hello must carry (KeyName)

	reap *reaper // the children's exits, for every session

	mu       sync.Mutex // guards sessions, conns, closed and idled
	sessions map[string]*held
	conns    map[*conn]struct{} // connections of agents, not attach streams (their sessions own those)
	closed   bool
	idled    bool           // the idle exit fired: Serve returns, no agent is taken
	idle     *time.Timer    // the idle exit (nil when never); armed while empty
	settle   *reclaim.Quiet // returns memory once quiet (settleAfter); stopped by Close
	wg       sync.WaitGroup // connection goroutines
}

// Listen validates cfg, makes the directory and listens on its socket. A stale
// socket (nobody answers) is replaced; a live one is an error (another holder runs).
func Listen(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("holder: Config.Dir is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := datadir.Ensure(cfg.Dir); err != nil {
		return nil, fmt.Errorf("holder: %w", err)
	}
	path := filepath.Join(cfg.Dir, SocketName)
	if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("holder: another holder listens on %s", path)
	}
	var rnd [32]byte
	_, _ = rand.Read(rnd[:])
	key := hex.EncodeToString(rnd[:])
	// Written before the socket exists: an agent that reaches the new socket
	// reads this key (one that read an older key is refused and dials again).
	if err := datadir.WriteFile(filepath.Join(cfg.Dir, KeyName), []byte(key), 0o600); err != nil {
		return nil, fmt.Errorf("holder: key: %w", err)
	}
	_ = os.Remove(path)
	// Not umask: it is the whole process's, and a file or directory another
	// goroutine makes meanwhile would get it (a session's integration directory
	// made 0600 is one a sandboxed shell without capabilities cannot enter).
	// Until the chmod the socket has the process's umask; the directory is the
	// user's alone, and the peer check and the key hold anyway.
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("holder: listen: %w", err)
	}
	ln.SetUnlinkOnClose(false) // a holder exiting leaves it; the next one replaces it
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("holder: %w", err)
	}
	s := &Server{cfg: cfg, log: log, ln: ln, path: path, key: key, reap: newReaper(), sessions: map[string]*held{}, conns: map[*conn]struct{}{}}
	s.settle = reclaim.New(settleAfter)
	switch {
	case cfg.IdleExit == 0:
		s.cfg.IdleExit = DefaultIdleExit
	case cfg.IdleExit < 0:
		return s, nil
	}
	s.idle = time.AfterFunc(s.cfg.IdleExit, s.idleFired)
	return s, nil
}

// idleFired ends Serve when the holder is still empty; a session or an agent that
// came since keeps it (the timer is armed again when they are gone).
func (s *Server) idleFired() {
	s.mu.Lock()
	empty := len(s.sessions) == 0 && len(s.conns) == 0 && !s.closed
	if empty {
		s.idled = true
	}
	s.mu.Unlock()
	if empty {
		s.log.Info("holder exits: no session and no agent", "idle", s.cfg.IdleExit)
		s.ln.Close()
	}
}

// armIdleLocked starts the idle exit's count when the holder is empty. s.mu held.
func (s *Server) armIdleLocked() {
	if s.idle != nil && len(s.sessions) == 0 && len(s.conns) == 0 {
		s.idle.Reset(s.cfg.IdleExit)
	}
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Serve accepts agents until ctx ends, Close, or the idle exit (Config.IdleExit);
// it then stops listening and returns nil (the sessions stay until Close).
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	var backoff time.Duration // after an accept that failed for want of resources
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || s.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) ||
				errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED) {
				// Out of descriptors or memory for a moment (or the agent gave up
				// on the connection): returning would end every session (cmd closes
				// the holder when Serve returns). Wait and accept again.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("holder: accept failed; retrying", "err", err, "in", backoff)
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
				continue
			}
			return fmt.Errorf("holder: accept: %w", err)
		}
		backoff = 0
		if err := checkPeer(c); err != nil {
			s.log.Warn("holder refused a connection", "err", err)
			c.Close()
			continue
		}
		hc := newConn(c)
		s.mu.Lock()
		if s.closed || s.idled {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[hc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(hc)
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.idled
}

// Close stops listening, ends every session (SIGHUP, SIGKILL after a grace) and
// every connection, and waits for them and for every goroutine of the holder.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.idle != nil {
		s.idle.Stop()
	}
	s.settle.Stop()
	sessions := s.sessions
	s.sessions = map[string]*held{}
	for c := range s.conns {
		c.close()
	}
	s.mu.Unlock()
	s.ln.Close()
	var wg sync.WaitGroup
	for _, h := range sessions {
		wg.Go(func() { h.close(closeGrace) })
	}
	wg.Wait()
	s.wg.Wait()
	s.reap.close()
	return nil
}

// serveConn does the hello, then answers requests until the connection closes; an
// attach turns the connection into that session's stream.
func (s *Server) serveConn(c *conn) {
	defer s.wg.Done()
	streaming := false // c became a session's stream: the session closes it
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.armIdleLocked()
		s.touchedLocked()
		s.mu.Unlock()
		if !streaming {
			c.close()
		}
	}()
	var hi hello
	files, err := c.recvJSON(kindHello, &hi)
	closeAll(files)
	if err != nil {
		return
	}
	if hi.Proto != Proto {
		_ = c.sendJSON(kindReply, reply{Error: fmt.Sprintf("%v: this holder speaks protocol %d, the agent %d: run an agent that speaks %d, or restart the holder with the new binary (that ends its sessions)", ErrVersion, Proto, hi.Proto, Proto)})
		return
	}
	if subtle.ConstantTimeCompare([]byte(hi.Key), []byte(s.key)) != 1 {
		s.log.Warn("holder refused a connection: wrong key", "pid", hi.PID)
		_ = c.sendJSON(kindReply, reply{Error: ErrDenied.Error() + " (not the holder's agent: it reads " + KeyName + " in the holder's directory)", Denied: true})
		return
	}
	if err := c.sendJSON(kindHello, hello{Proto: Proto, Version: s.cfg.Version, PID: os.Getpid()}); err != nil {
		return
	}
	for {
		var req request
		files, err := c.recvJSON(kindRequest, &req)
		if err != nil {
			return
		}
		if req.Op == "attach" {
			closeAll(files)
			streaming = s.attach(c, req)
			return
		}
		if err := s.answer(c, req, files); err != nil {
			return
		}
		s.mu.Lock()
		s.touchedLocked()
		s.mu.Unlock()
	}
}

// touchedLocked counts settleAfter from now. s.mu held.
func (s *Server) touchedLocked() {
	if !s.closed {
		s.settle.Touch()
	}
}

// answer does one request and replies.
func (s *Server) answer(c *conn, req request, files []*os.File) error {
	if req.Op != "spawn" {
		closeAll(files)
	}
	fail := func(err error) error {
		return c.sendJSON(kindReply, reply{Error: err.Error(), NotFound: errors.Is(err, ErrNoSession)})
	}
	switch req.Op {
	case "list":
		s.mu.Lock()
		list := make([]Info, 0, len(s.sessions))
		for _, h := range s.sessions {
			list = append(list, h.info())
		}
		s.mu.Unlock()
		return c.sendJSON(kindReply, reply{List: list})
	case "spawn":
		sp := req.Spawn
		if sp == nil || api.ValidName(sp.ID) != nil {
			closeAll(files)
			return fail(fmt.Errorf("%w: spawn needs a valid id", ErrProtocol))
		}
		s.mu.Lock()
		_, dup := s.sessions[sp.ID]
		s.mu.Unlock()
		if dup {
			closeAll(files)
			return fail(fmt.Errorf("holder: session %s exists", sp.ID))
		}
		h, err := spawn(sp, files, s.reap)
		if err != nil {
			return fail(err)
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			h.close(closeGrace) // before Close stops the reaper: it waits for this connection
			return fail(ErrClosed)
		}
		s.sessions[sp.ID] = h
		s.mu.Unlock()
		s.log.Info("holder started a session", "session", sp.ID, "pid", h.pid)
		info := h.info()
		return h.withFiles(func(files []*os.File) error {
			return c.sendJSON(kindReply, reply{Info: &info, FDs: 1}, files[0])
		})
	case "signal":
		h, err := s.session(req.ID)
		if err != nil {
			return fail(err)
		}
		h.signal(syscall.Signal(req.Signal))
		return c.sendJSON(kindReply, reply{})
	case "meta":
		h, err := s.session(req.ID)
		if err != nil {
			return fail(err)
		}
		if len(req.Meta) > maxMeta {
			return fail(fmt.Errorf("%w: meta of %d bytes (limit %d)", ErrProtocol, len(req.Meta), maxMeta))
		}
		h.mu.Lock()
		h.meta = append([]byte(nil), req.Meta...)
		h.mu.Unlock()
		return c.sendJSON(kindReply, reply{})
	case "close":
		h, err := s.session(req.ID)
		if err != nil {
			return fail(err)
		}
		h.close(closeGrace)
		s.mu.Lock()
		if s.sessions[req.ID] == h {
			delete(s.sessions, req.ID)
		}
		s.mu.Unlock()
		info := h.info()
		s.log.Info("holder closed a session", "session", req.ID)
		return c.sendJSON(kindReply, reply{Info: &info})
	}
	return fail(fmt.Errorf("%w: unknown op %q", ErrProtocol, req.Op))
}

func (s *Server) session(id string) (*held, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoSession, id)
	}
	return h, nil
}

// attach makes c the session's stream of output from req.From (sent while there
// is output, until the exit, or until the agent goes or an attach by the stream's
// epoch replaces it), replies with the session's info, nonce, fds and the stream's
// epoch, then lets the stream send. It reports whether c is the session's now.
func (s *Server) attach(c *conn, req request) bool {
	h, err := s.session(req.ID)
	if err != nil {
		_ = c.sendJSON(kindReply, reply{Error: err.Error(), NotFound: true})
		return false
	}
	pid := 0
	if cred, err := peerCred(c.c); err == nil {
		pid = int(cred.Pid)
	}
	o, info, err := h.attach(c, req.From, req.Epoch, pid)
	if err != nil {
		stale := errors.Is(err, ErrStale)
		if stale {
			s.log.Warn("holder refused an attach", "session", h.id, "pid", pid, "err", err)
		}
		_ = c.sendJSON(kindReply, reply{Error: err.Error(), NotFound: !stale, Stale: stale})
		return false
	}
	if info.Epoch > 1 {
		s.log.Info("holder session attached again", "session", h.id, "pid", pid, "epoch", info.Epoch)
	}
	from := o.off // no sender runs before begin
	if err := h.withFiles(func(files []*os.File) error {
		return c.sendJSON(kindReply, reply{Info: &info, Nonce: h.nonce, From: from, Epoch: o.epoch, FDs: len(files)}, files...)
	}); err != nil {
		_ = c.sendJSON(kindReply, reply{Error: err.Error(), NotFound: true})
		h.begin(o, false)
		return true
	}
	c.release() // a stream is never read: it holds no buffer
	if testAfterReply != nil {
		testAfterReply()
	}
	h.begin(o, true)
	return true
}

// testAfterReply, when set (by tests only), runs between an attach's reply and
// the start of its stream.
var testAfterReply func()
