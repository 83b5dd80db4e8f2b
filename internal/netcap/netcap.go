// Package netcap caps the connections a listener holds: in all and per source
// address. A connection costs its server a descriptor from the moment it is
// accepted, whoever opened it and whether or not it ever authenticates, so a
// server that accepts without bound gives the descriptors every other listener
// and file of its process needs to anyone who can connect.
//
// Over a cap, the oldest connection its server marked idle (Idle: an HTTP
// connection waiting for its next request, an SSH connection that has not logged
// in) gives way to the new one; when none is idle, the new connection is closed
// at once. Refusals and evictions are counted, and logged at most once per
// logEvery.
//
// Accept also waits out the errors that say the process is short of descriptors
// or memory for a moment (Temporary), with backoff, instead of returning them:
// a server whose accept loop returns on those stops serving for good.
package netcap

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Backoff bounds for an accept that failed with a temporary error.
const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = time.Second
	// logEvery is the least time between two log lines of one listener about
	// refused connections or failed accepts.
	logEvery = 10 * time.Second
)

// Config configures New.
type Config struct {
	// Max bounds the connections open at once. Default DefaultMax().
	Max int
	// PerHost bounds the connections open at once from one source address
	// (IP). 0: Max/4; negative: no bound per address.
	PerHost int
	// Name names the listener in log lines ("http", "ssh").
	Name string
	// Logger receives the rate-limited log lines. Default slog.Default().
	Logger *slog.Logger
}

// DefaultMax is a quarter of the process's descriptor limit (RLIMIT_NOFILE),
// between 64 and 4096: the rest is for the process's other listeners, its
// outgoing connections and its files.
func DefaultMax() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 1024
	}
	return int(min(max(rl.Cur/4, 64), 4096))
}

// Listener is a net.Listener with caps. Its connections are *Conn.
type Listener struct {
	net.Listener
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	open   map[*Conn]struct{}
	byHost map[string]int
	closed bool
	// lastLog is when a refusal or accept error was last logged.
	lastLog time.Time

	refused atomic.Uint64
	evicted atomic.Uint64
	done    chan struct{} // closed by Close: ends a backoff wait
}

// New wraps ln. Closing the Listener closes ln; connections already accepted
// stay open.
func New(ln net.Listener, cfg Config) *Listener {
	if cfg.Max <= 0 {
		cfg.Max = DefaultMax()
	}
	if cfg.PerHost == 0 {
		cfg.PerHost = max(1, cfg.Max/4)
	}
	if cfg.Name == "" {
		cfg.Name = "listener"
	}
	l := &Listener{Listener: ln, cfg: cfg, log: cfg.Logger, open: map[*Conn]struct{}{}, byHost: map[string]int{}, done: make(chan struct{})}
	if l.log == nil {
		l.log = slog.Default()
	}
	return l
}

// Temporary reports whether an accept error says the process is short of a
// resource for a moment (descriptors, buffers, memory) or the client gave up
// on the connection before it was accepted: the accept loop should wait a
// little and accept again.
func Temporary(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, net.ErrClosed)
}

// Backoff is the wait between accepts that failed with a temporary error:
// 5 ms doubling to 1 s; Reset after an accept that worked. The zero value is
// ready.
type Backoff struct{ d time.Duration }

// Next returns the next wait.
func (b *Backoff) Next() time.Duration {
	b.d = min(max(2*b.d, minBackoff), maxBackoff)
	return b.d
}

// Reset starts the waits afresh.
func (b *Backoff) Reset() { b.d = 0 }

// Accept waits for a connection that fits under the caps. Temporary errors are
// waited out (with Backoff); other errors, and Close, end it.
func (l *Listener) Accept() (net.Conn, error) {
	var bo Backoff
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			if !Temporary(err) || l.isClosed() {
				return nil, err
			}
			d := bo.Next()
			l.logf("accept failed; retrying", "err", err, "in", d)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
			}
			continue
		}
		bo.Reset()
		if c := l.admit(nc); c != nil {
			return c, nil
		}
	}
}

// admit counts nc in, making room by closing the oldest idle connection when a
// cap is reached; nil: nc was refused (and closed).
func (l *Listener) admit(nc net.Conn) *Conn {
	host := hostOf(nc.RemoteAddr())
	l.mu.Lock()
	var victims []*Conn
	if l.cfg.PerHost > 0 && l.byHost[host] >= l.cfg.PerHost {
		if v := l.oldestIdleLocked(host); v != nil {
			victims = append(victims, v)
			l.dropLocked(v)
		}
	}
	if len(l.open) >= l.cfg.Max {
		if v := l.oldestIdleLocked(""); v != nil {
			victims = append(victims, v)
			l.dropLocked(v)
		}
	}
	fits := len(l.open) < l.cfg.Max && (l.cfg.PerHost <= 0 || l.byHost[host] < l.cfg.PerHost)
	var c *Conn
	if fits && !l.closed {
		c = &Conn{Conn: nc, l: l, host: host}
		l.open[c] = struct{}{}
		l.byHost[host]++
	}
	open := len(l.open)
	l.mu.Unlock()
	for _, v := range victims {
		l.evicted.Add(1)
		v.Conn.Close()
	}
	if c == nil {
		l.refused.Add(1)
		nc.Close()
		l.logf("connection refused: too many open", "remote", host, "open", open, "max", l.cfg.Max, "per_host", l.cfg.PerHost,
			"refused", l.refused.Load(), "evicted", l.evicted.Load())
	} else if len(victims) > 0 {
		l.logf("idle connection closed for a new one", "remote", host, "open", open, "max", l.cfg.Max,
			"refused", l.refused.Load(), "evicted", l.evicted.Load())
	}
	return c
}

// oldestIdleLocked is the connection marked idle longest (from host, unless
// host is ""), or nil. l.mu held.
func (l *Listener) oldestIdleLocked(host string) *Conn {
	var old *Conn
	for c := range l.open {
		if c.idleSince.IsZero() || host != "" && c.host != host {
			continue
		}
		if old == nil || c.idleSince.Before(old.idleSince) {
			old = c
		}
	}
	return old
}

// dropLocked stops counting c. l.mu held.
func (l *Listener) dropLocked(c *Conn) {
	if _, ok := l.open[c]; !ok {
		return
	}
	delete(l.open, c)
	if l.byHost[c.host]--; l.byHost[c.host] <= 0 {
		delete(l.byHost, c.host)
	}
}

// logf logs msg unless the listener logged less than logEvery ago.
func (l *Listener) logf(msg string, args ...any) {
	now := time.Now()
	l.mu.Lock()
	if now.Sub(l.lastLog) < logEvery {
		l.mu.Unlock()
		return
	}
	l.lastLog = now
	l.mu.Unlock()
	l.log.Warn(l.cfg.Name+": "+msg, args...)
}

func (l *Listener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close stops listening (Accept returns net.ErrClosed); the connections
// accepted stay open.
func (l *Listener) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// Open is how many connections are open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

// Refused is how many connections were closed at once for want of room.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Evicted is how many idle connections were closed to make room.
func (l *Listener) Evicted() uint64 { return l.evicted.Load() }

// Idle marks c (a connection this listener accepted; others are ignored) idle
// or busy: an idle one gives way to a new connection when a cap is reached.
// An http.Server's ConnState hook calls it with StateNew and StateIdle as idle.
func (l *Listener) Idle(c net.Conn, idle bool) {
	cc, ok := c.(*Conn)
	if !ok || cc.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.open[cc]; !ok {
		return
	}
	switch {
	case !idle:
		cc.idleSince = time.Time{}
	case cc.idleSince.IsZero():
		cc.idleSince = time.Now()
	}
}

// Conn is a connection a Listener accepted: Close gives its room back.
type Conn struct {
	net.Conn
	l         *Listener
	host      string
	idleSince time.Time // zero: busy; guarded by l.mu
	once      sync.Once
}

// Close closes the connection and gives its room back.
func (c *Conn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.dropLocked(c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// CloseWrite shuts the connection's writing side when it has one (TCP); it
// does nothing otherwise.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// hostOf is the IP of addr (the address itself when it has no port).
func hostOf(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	s := addr.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return strings.Trim(s, "[]")
}
