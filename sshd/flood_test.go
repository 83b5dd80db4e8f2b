package sshd_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/sshd"
)

// dialFrom opens a TCP connection to addr from the loopback address from
// (127.0.0.x), so that a test can be many clients.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// loginFrom logs in over a connection from the address from.
func (sf *sshFixture) loginFrom(t *testing.T, from, user string, key ssh.Signer) (*ssh.Client, error) {
	t.Helper()
	hk, err := sf.srv.HostKey()
	if err != nil {
		t.Fatal(err)
	}
	nc := dialFrom(t, from, sf.srv.Addr())
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	c, chans, reqs, err := ssh.NewClientConn(nc, sf.srv.Addr(), &ssh.ClientConfig{
		User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)}, HostKeyCallback: ssh.FixedHostKey(hk),
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// TestSSHRefusalFlood is the first attack of issue 15 #8: clients that cannot log
// in write what they like into the audit log (a 200 KB user name per attempt,
// with terminal escapes). Now a refused login's record holds a short, printable
// name, and refusals beyond a rate are counted instead of recorded one by one.
func TestSSHRefusalFlood(t *testing.T) {
	sf := newSSHFixture(t)
	huge := "\x1b[2J" + strings.Repeat("A", 200<<10)
	const attempts = 50
	for i := range attempts {
		from := fmt.Sprintf("127.0.0.%d", 10+i/10) // 10 per address: under its rate limit
		if c, err := sf.loginFrom(t, from, huge, sf.keys["stranger"]); err == nil {
			c.Close()
			t.Fatal("a stranger logged in")
		}
		if i == 9 {
			if st, err := os.Stat(sf.audit); err != nil || st.Size() > 16<<10 {
				t.Fatalf("10 refused logins wrote %d bytes of audit (%v)", st.Size(), err)
			}
		}
	}
	sf.srv.Close() // records how many refusals it did not record one by one
	recorded, dropped := 0, 0
	for _, r := range testutil.AuditRecords(t, sf.audit) {
		if r.Result != "refused" {
			continue
		}
		if len(r.Detail) > 300 || strings.ContainsAny(r.Detail+r.Actor, "\x1b") {
			t.Errorf("a refused login's record holds the client's name as it came: %.200q", r.Detail)
		}
		if m := regexp.MustCompile(`(\d+) refused logins`).FindStringSubmatch(r.Detail); m != nil {
			n, _ := strconv.Atoi(m[1])
			dropped += n
		}
		if strings.HasPrefix(r.Actor, "ssh:SHA256:") {
			recorded++
		}
	}
	if recorded+dropped != attempts || recorded >= attempts {
		t.Errorf("%d refusals recorded, %d counted, want %d in all, fewer recorded", recorded, dropped, attempts)
	}
	st, _ := os.Stat(sf.audit)
	t.Logf("%d refused logins: %d records, %d counted, %d bytes of audit", attempts, recorded, dropped, st.Size())
}

// TestSSHHandshakeFlood is the second attack of issue 15 #8: idle TCP
// connections (64, from several addresses, each under its rate limit) took every
// connection slot, and people with keys were refused until they timed out. Now
// connections that have not logged in have their own slots, the oldest gives way
// to a new one, and each has a short deadline.
func TestSSHHandshakeFlood(t *testing.T) {
	const deadline = 2 * time.Second
	sf := newSSHFixture(t, sshOpt{ssh: func(c *sshd.Config) { c.HandshakeTimeout = deadline }})
	before, err := sf.loginFrom(t, "127.0.0.2", "me", sf.keys["viewer"])
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	var idle []net.Conn
	for i := range 64 {
		idle = append(idle, dialFrom(t, fmt.Sprintf("127.0.0.%d", 20+i/16), sf.srv.Addr()))
	}
	defer func() {
		for _, nc := range idle {
			nc.Close()
		}
	}()
	start := time.Now()
	c, err := sf.loginFrom(t, "127.0.0.3", "me", sf.keys["operator"])
	if err != nil {
		t.Fatalf("a key holder was refused while 64 idle connections waited: %v", err)
	}
	if out, _, code := execSSH(t, c, "nodes"); code != 0 || !strings.Contains(out, "role=operator") {
		t.Errorf("after the login: %q %d", out, code)
	}
	c.Close()
	t.Logf("logged in %v after 64 idle connections", time.Since(start))
	if out, _, code := execSSH(t, before, "nodes"); code != 0 || !strings.Contains(out, "role=viewer") {
		t.Errorf("a connection logged in before the flood: %q %d", out, code)
	}
	// Every idle connection is closed by the server within its deadline.
	for i, nc := range idle {
		nc.SetReadDeadline(start.Add(deadline + 5*time.Second))
		buf := make([]byte, 4096)
		var err error
		for err == nil {
			_, err = nc.Read(buf)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("idle connection %d still open %v after the flood", i, time.Since(start))
		}
	}
}

// exhausted is a listener whose first accepts fail as they do in a process out
// of descriptors.
type exhausted struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (e *exhausted) Accept() (net.Conn, error) {
	e.mu.Lock()
	if e.fails > 0 {
		e.fails--
		e.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	e.mu.Unlock()
	return e.Listener.Accept()
}

// TestSSHAcceptRecovers is the aftermath of the descriptor exhaustion attack of
// issue 25 #6: the accept loop returned on its first EMFILE, and the SSH front
// door never served again once descriptors were back. Now accepts that fail for
// want of descriptors are retried with backoff.
func TestSSHAcceptRecovers(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ex := &exhausted{Listener: inner, fails: 8}
	sf := newSSHFixture(t, sshOpt{ssh: func(c *sshd.Config) { c.Listener = ex }})
	c, err := sf.loginFrom(t, "127.0.0.2", "me", sf.keys["operator"])
	if err != nil {
		t.Fatalf("no login after the accepts that failed with EMFILE: %v", err)
	}
	defer c.Close()
	if out, _, code := execSSH(t, c, "nodes"); code != 0 || !strings.Contains(out, "role=operator") {
		t.Errorf("after the login: %q %d", out, code)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.fails != 0 {
		t.Errorf("%d failing accepts left", ex.fails)
	}
}

// stays logs in with key from the address from and reports whether the
// connection was let stay (a session opens on it); the connection is returned
// for the caller to close.
func (sf *sshFixture) stays(t *testing.T, from string, key ssh.Signer) (*ssh.Client, bool) {
	t.Helper()
	c, err := sf.loginFrom(t, from, "me", key)
	if err != nil {
		t.Fatalf("login from %s: %v", from, err)
	}
	// A refused login is closed by the server after the handshake; one let stay
	// answers a global request (testutil.SSHStays: unlike a session request, it
	// cannot wait for ever on a connection the server closed).
	return c, testutil.SSHStays(c)
}

// TestSSHLoginSlots is the attack of issue 25 #7: one viewer key logged in 64
// times and took every SSH login slot, and admins were refused meanwhile. Now one
// key holds at most MaxConnsPerKey connections, viewers together half of
// MaxConns, viewers and operators all but an eighth: with one viewer key at its
// cap, and then many viewer keys at theirs, an operator and an admin log in.
func TestSSHLoginSlots(t *testing.T) {
	sf := newSSHFixture(t)
	var open []*ssh.Client
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	attempt := 0
	from := func() string { // 10 logins per address: under its rate limit
		attempt++
		return fmt.Sprintf("127.0.0.%d", 10+attempt/10)
	}
	login := func(key ssh.Signer) bool {
		c, ok := sf.stays(t, from(), key)
		open = append(open, c)
		return ok
	}
	mustLogin := func(who string) {
		t.Helper()
		c, ok := sf.stays(t, from(), sf.keys[who])
		open = append(open, c)
		if !ok {
			t.Fatalf("the %s was refused", who)
		}
		if out, _, code := execSSH(t, c, "nodes"); code != 0 || !strings.Contains(out, "role="+who) {
			t.Fatalf("the %s's verb: %q %d", who, out, code)
		}
	}

	// One viewer key, as many logins as the server has slots.
	stayed := 0
	for range sshd.DefaultMaxConns + 2 {
		if login(sf.keys["viewer"]) {
			stayed++
		}
	}
	if stayed != sshd.DefaultMaxConnsPerKey {
		t.Errorf("one viewer key holds %d connections, want %d", stayed, sshd.DefaultMaxConnsPerKey)
	}
	mustLogin("admin")
	mustLogin("operator")

	// Many viewer keys, each at its cap: viewers hold half the slots.
	ak, err := os.ReadFile(sf.ak)
	if err != nil {
		t.Fatal(err)
	}
	var viewers []ssh.Signer
	for range 8 {
		k := newSigner(t)
		viewers = append(viewers, k)
		ak = append(append(ak, "role=viewer "...), ssh.MarshalAuthorizedKey(k.PublicKey())...)
	}
	if err := os.WriteFile(sf.ak, ak, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range viewers {
		for range sshd.DefaultMaxConnsPerKey {
			if login(k) {
				stayed++
			}
		}
	}
	if stayed != sshd.DefaultMaxConns/2 {
		t.Errorf("viewers hold %d connections, want %d", stayed, sshd.DefaultMaxConns/2)
	}
	mustLogin("admin")
	mustLogin("operator")
	var refusals int
	for _, r := range testutil.AuditRecords(t, sf.audit) {
		if r.Action == "ssh login" && r.Result == "refused" && strings.Contains(r.Error, "connections") {
			refusals++
		}
	}
	if want := len(open) - stayed - 4; refusals != want {
		t.Errorf("%d refused logins in the audit, want %d", refusals, want)
	}
}
