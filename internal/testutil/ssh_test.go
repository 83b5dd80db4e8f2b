package testutil

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// closingServer accepts one SSH login and closes the connection right after it,
// as a server does with a refused login.
func closingServer(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	conf := &ssh.ServerConfig{NoClientAuth: true}
	conf.AddHostKey(hk)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		if conn, _, _, err := ssh.NewServerConn(nc, conf); err == nil {
			conn.Close()
		}
		nc.Close()
	}()
	return ln.Addr().String()
}

// TestSSHSessionClosed: on a connection the server ended, SSHSession fails at
// once and SSHStays says the connection did not stay. (The hang SSHSession
// guards against needs NewSession to write in the instant between the mux loop
// closing its channels and the transport recording the read error: seen under
// load in CI, not reproducible on demand.)
func TestSSHSessionClosed(t *testing.T) {
	c, err := ssh.Dial("tcp", closingServer(t), &ssh.ClientConfig{User: "me", HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Wait() // the server has closed it
	s, err := SSHSession(c, time.Minute)
	if err == nil {
		t.Fatalf("session on a closed connection: %v %v", s, err)
	}
	if SSHStays(c) {
		t.Error("a closed connection stays")
	}
}
