package netcap_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/netcap"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

func TestMain(m *testing.M) { testutil.MainWithLeakCheck(m) }

// server accepts on a capped loopback listener and hands out what it accepted.
type server struct {
	ln       *netcap.Listener
	accepted chan net.Conn
	done     chan error
}

func serve(t *testing.T, inner net.Listener, cfg netcap.Config) *server {
	t.Helper()
	if inner == nil {
		var err error
		if inner, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	s := &server{ln: netcap.New(inner, cfg), accepted: make(chan net.Conn, 100), done: make(chan error, 1)}
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				s.done <- err
				return
			}
			s.accepted <- c
		}
	}()
	t.Cleanup(func() {
		s.ln.Close()
		<-s.done
		close(s.accepted)
		for c := range s.accepted {
			c.Close()
		}
	})
	return s
}

// dial connects from the loopback address from (127.0.0.x).
func dial(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (a read sees the end)
// within d.
func closedByServer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// take waits for the server's next accepted connection.
func (s *server) take(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.accepted:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// TestPerHost is the descriptor exhaustion attack from one address: connections
// beyond the address's cap are closed at once, and another address still gets in.
func TestPerHost(t *testing.T) {
	s := serve(t, nil, netcap.Config{Max: 8, PerHost: 3})
	addr := s.ln.Addr().String()
	var held []net.Conn
	for range 3 {
		dial(t, "127.0.0.2", addr)
		held = append(held, s.take(t))
	}
	over := dial(t, "127.0.0.2", addr)
	if !closedByServer(over, 5*time.Second) {
		t.Fatal("a fourth connection from one address was kept open (per-host cap 3)")
	}
	if s.ln.Refused() != 1 || s.ln.Open() != 3 {
		t.Fatalf("refused %d open %d, want 1 and 3", s.ln.Refused(), s.ln.Open())
	}
	other := dial(t, "127.0.0.3", addr)
	s.take(t)
	if closedByServer(other, 100*time.Millisecond) {
		t.Fatal("another address was refused")
	}
	// A closed connection gives its room back.
	held[0].Close()
	dial(t, "127.0.0.2", addr)
	s.take(t)
	if s.ln.Open() != 4 {
		t.Fatalf("open %d, want 4", s.ln.Open())
	}
}

// TestIdleGivesWay: at the total cap, the connection idle longest is closed for
// a new one; with none idle, the new one is refused.
func TestIdleGivesWay(t *testing.T) {
	s := serve(t, nil, netcap.Config{Max: 4, PerHost: -1})
	addr := s.ln.Addr().String()
	var clients, srv []net.Conn
	for i := range 4 {
		clients = append(clients, dial(t, "127.0.0.2", addr))
		srv = append(srv, s.take(t))
		if i < 2 {
			s.ln.Idle(srv[i], true)
		}
	}
	dial(t, "127.0.0.4", addr)
	srv = append(srv, s.take(t))
	if !closedByServer(clients[0], 5*time.Second) {
		t.Fatal("the oldest idle connection was not closed for a new one")
	}
	if closedByServer(clients[1], 100*time.Millisecond) {
		t.Fatal("a younger idle connection was closed too")
	}
	s.ln.Idle(srv[1], false) // busy again: nothing is idle now
	late := dial(t, "127.0.0.5", addr)
	if !closedByServer(late, 5*time.Second) {
		t.Fatal("a connection over the cap was kept while none was idle")
	}
	for _, c := range clients[1:] {
		if closedByServer(c, 50*time.Millisecond) {
			t.Fatal("a busy connection was closed")
		}
	}
	if s.ln.Evicted() != 1 || s.ln.Refused() != 1 || s.ln.Open() != 4 {
		t.Fatalf("evicted %d refused %d open %d, want 1 1 4", s.ln.Evicted(), s.ln.Refused(), s.ln.Open())
	}
}

// flaky fails its first n accepts with err, as a process out of descriptors does.
type flaky struct {
	net.Listener
	mu  sync.Mutex
	n   int
	err error
}

func (f *flaky) Accept() (net.Conn, error) {
	f.mu.Lock()
	if f.n > 0 {
		f.n--
		f.mu.Unlock()
		return nil, f.err
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

// TestTemporaryErrors: accepts that fail for want of descriptors (or buffers,
// memory, an aborted connection) are retried, and the listener serves after them.
func TestTemporaryErrors(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		inner, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := &flaky{Listener: inner, n: 4, err: &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}}
		s := serve(t, f, netcap.Config{Max: 4})
		c := dial(t, "127.0.0.1", inner.Addr().String())
		s.take(t)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-s.done:
			t.Fatalf("%v: Accept returned %v", errno, err)
		default:
		}
	}
}

// TestCloseEndsBackoff: Close ends an Accept that waits out temporary errors.
func TestCloseEndsBackoff(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{Listener: inner, n: 1 << 30, err: &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}}
	ln := netcap.New(f, netcap.Config{})
	done := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		done <- err
	}()
	ln.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Accept after Close returned a connection")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}

// TestPermanentError: an error that is not temporary ends Accept.
func TestPermanentError(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	f := &flaky{Listener: inner, n: 1, err: io.ErrUnexpectedEOF}
	if _, err := netcap.New(f, netcap.Config{}).Accept(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Accept: %v", err)
	}
}
