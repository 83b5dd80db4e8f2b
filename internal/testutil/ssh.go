package testutil

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/ssh"
)

// ErrSSHClosed says the SSH connection ended before a session could open on it.
var ErrSSHClosed = errors.New("ssh connection closed")

// SSHSession opens a session on c, bounded by timeout, and fails fast when the
// connection is closed instead.
//
// golang.org/x/crypto/ssh (v0.58.0) can wait for ever in Client.NewSession
// when the server has just ended the connection: once the transport's reader
// has closed its packet channel, the mux loop closes the channels it holds and
// exits, but until the reader records its error a write still succeeds on the
// half-closed socket; the channel NewSession adds in that instant is never
// closed, and its open is never answered. A server that ends a connection (a
// refused login, an eviction) makes that a rare hang under load. The goroutine calling NewSession is left behind in that case; it
// is the library's, and ends with the test binary.
func SSHSession(c *ssh.Client, timeout time.Duration) (*ssh.Session, error) {
	type opened struct {
		s   *ssh.Session
		err error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := c.NewSession()
		done <- opened{s, err}
	}()
	closed := make(chan error, 1)
	go func() { closed <- c.Wait() }() // ends when c is closed, by either side
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case o := <-done:
		return o.s, o.err
	case err := <-closed:
		select { // both may be ready: an open session wins
		case o := <-done:
			return o.s, o.err
		default:
		}
		return nil, fmt.Errorf("%w: %v", ErrSSHClosed, err)
	case <-timer.C:
		return nil, fmt.Errorf("no session within %v", timeout)
	}
}

// SSHStays reports whether the server let c stay after its login: a refused
// login is closed by the server, an admitted one answers a global request.
// Unlike opening a session it cannot hang (see SSHSession): a global request
// on an ended connection fails at once.
func SSHStays(c *ssh.Client) bool {
	_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
	return err == nil
}
