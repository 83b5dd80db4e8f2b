package sshd_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/controller"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/sshd"
)

// sshFixture is a controller with its SSH front door, and keys of each role.
type sshFixture struct {
	*stack.Stack
	srv   *sshd.Server
	keys  map[string]ssh.Signer // admin, operator, viewer, stranger, ca
	audit string
	ak    string        // the authorized_keys file
	logs  *logBuffer    // the controller's log
	execs chan []string // what the Exec stand-in was asked to run
}

func newSigner(t *testing.T) ssh.Signer {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sshOpt changes a fixture's controller or SSH config (either may be nil).
type sshOpt struct {
	ctl func(*controller.Config)
	ssh func(*sshd.Config)
}

func newSSHFixture(t *testing.T, opts ...sshOpt) *sshFixture {
	t.Helper()
	dir := t.TempDir()
	audit := filepath.Join(dir, "audit.jsonl")
	logs := &logBuffer{}
	f := stack.New(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Config: func(c *controller.Config) {
		c.AuditFile = audit
		c.Logger = slog.New(logs)
		for _, o := range opts {
			if o.ctl != nil {
				o.ctl(c)
			}
		}
	}})
	sf := &sshFixture{Stack: f, keys: map[string]ssh.Signer{}, audit: audit, logs: logs, execs: make(chan []string, 16)}
	for _, k := range []string{"admin", "operator", "viewer", "stranger", "ca", "default"} {
		sf.keys[k] = newSigner(t)
	}
	line := func(k string) string {
		return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sf.keys[k].PublicKey())))
	}
	ak := strings.Join([]string{
		"# fleetmux keys",
		`role=admin ` + line("admin") + ` root@laptop`,
		`role=operator ` + line("operator") + ` bob`,
		`role=viewer ` + line("viewer") + ` alice`,
		line("default") + ` nobody-said`,
		`cert-authority,principals="carol,dave",role=operator ` + line("ca") + ` our CA`,
	}, "\n") + "\n"
	akFile := filepath.Join(dir, "authorized_keys")
	sf.ak = akFile
	if err := os.WriteFile(akFile, []byte(ak), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	sc := sshd.Config{
		Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(dir, "host_key"), AuthorizedKeys: akFile,
		Exec: func(ctx context.Context, args []string, role, actor string, stdin io.Reader, stdout, stderr io.Writer) int {
			// Stands in for the CLI (cmd wires the real one; its own tests run it
			// through OpenSSH): echoes what it was given.
			sf.execs <- args
			fmt.Fprintf(stdout, "verb=%s role=%s actor=%s\n", args[0], role, actor)
			if args[0] == "run" {
				return 3
			}
			return 0
		},
	}
	for _, o := range opts {
		if o.ssh != nil {
			o.ssh(&sc)
		}
	}
	sc.Fleet, sc.Logger = f.Ctl, slog.New(logs)
	sf.srv, err = sshd.Start(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sf.srv.Close() })
	return sf
}

func (sf *sshFixture) dial(t *testing.T, user string, auth ...ssh.AuthMethod) (*ssh.Client, error) {
	hk, err := sf.srv.HostKey()
	if err != nil {
		t.Fatal(err)
	}
	return ssh.Dial("tcp", sf.srv.Addr(), &ssh.ClientConfig{
		User: user, Auth: auth, HostKeyCallback: ssh.FixedHostKey(hk), Timeout: 10 * time.Second,
	})
}

func (sf *sshFixture) login(t *testing.T, user, key string) *ssh.Client {
	t.Helper()
	c, err := sf.dial(t, user, ssh.PublicKeys(sf.keys[key]))
	if err != nil {
		t.Fatalf("login as %s with the %s key: %v", user, key, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exec runs a command and returns stdout, stderr and the exit status.
func execSSH(t *testing.T, c *ssh.Client, cmd string) (string, string, int) {
	t.Helper()
	s, err := testutil.SSHSession(c, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	err = s.Run(cmd)
	code := 0
	if ee, ok := err.(*ssh.ExitError); ok {
		code = ee.ExitStatus()
	} else if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return out.String(), errb.String(), code
}

func TestSSHAuth(t *testing.T) {
	sf := newSSHFixture(t)
	// Keys: role from the option, and the default (viewer).
	for key, role := range map[string]string{"admin": "admin", "operator": "operator", "viewer": "viewer", "default": "viewer"} {
		c := sf.login(t, "me", key)
		out, _, code := execSSH(t, c, "nodes")
		if code != 0 || !strings.Contains(out, "role="+role) || !strings.Contains(out, "actor=ssh:SHA256:") {
			t.Errorf("%s key: %q (exit %d), want role %s", key, out, code, role)
		}
	}
	if _, err := sf.dial(t, "me", ssh.PublicKeys(sf.keys["stranger"])); err == nil {
		t.Error("an unknown key was accepted")
	}
	if _, err := sf.dial(t, "me", ssh.Password("hunter2")); err == nil {
		t.Error("a password was accepted")
	}
	// Certificates of the listed CA, for a listed principal.
	cert := func(principals []string, valid time.Duration) ssh.Signer {
		user := newSigner(t)
		c := &ssh.Certificate{
			Key: user.PublicKey(), CertType: ssh.UserCert, KeyId: "carol@example", ValidPrincipals: principals,
			ValidAfter: uint64(time.Now().Add(-time.Minute).Unix()), ValidBefore: uint64(time.Now().Add(valid).Unix()),
		}
		if err := c.SignCert(rand.Reader, sf.keys["ca"]); err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewCertSigner(c, user)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c, err := sf.dial(t, "carol", ssh.PublicKeys(cert([]string{"carol"}, time.Hour)))
	if err != nil {
		t.Fatalf("a good certificate was refused: %v", err)
	}
	out, _, _ := execSSH(t, c, "ls")
	c.Close()
	if !strings.Contains(out, "role=operator") || !strings.Contains(out, "actor=ssh:carol:") {
		t.Errorf("certificate login: %q", out)
	}
	if _, err := sf.dial(t, "mallory", ssh.PublicKeys(cert([]string{"mallory"}, time.Hour))); err == nil {
		t.Error("a certificate for the wrong principal was accepted")
	}
	if _, err := sf.dial(t, "carol", ssh.PublicKeys(cert([]string{"carol"}, -30*time.Second))); err == nil {
		t.Error("an expired certificate was accepted")
	}
	// Refusals are audited.
	testutil.Eventually(t, 5*time.Second, func() bool {
		b, _ := os.ReadFile(sf.audit)
		return strings.Contains(string(b), `"action":"ssh login","detail":"me from`) && strings.Contains(string(b), `"result":"refused"`)
	}, "refused logins in the audit log")
}

func TestSSHCommands(t *testing.T) {
	sf := newSSHFixture(t)
	admin := sf.login(t, "me", "admin")
	out, _, code := execSSH(t, admin, `run n1/s1 -- 'echo hi; exit 3'`)
	if code != 3 || !strings.Contains(out, "verb=run role=admin") {
		t.Fatalf("run: %q exit %d", out, code)
	}
	if got := <-sf.execs; strings.Join(got, "|") != "run|n1/s1|--|echo hi; exit 3" {
		t.Fatalf("the command line was split as %q", got)
	}
	viewer := sf.login(t, "me", "viewer")
	_, errs, code := execSSH(t, viewer, "run n1/s1 -- true")
	if code != 255 || !strings.Contains(errs, "needs the operator role") {
		t.Fatalf("viewer run: %q exit %d, want 255 (denied: fleetmux's own failure, never the command's)", errs, code)
	}
	if _, _, code := execSSH(t, admin, "run --token x n1/s1 -- true"); code != 255 {
		t.Fatalf("run with a refused flag: exit %d, want 255", code)
	}
	operator := sf.login(t, "me", "operator")
	// kill: an operator's reaches the CLI (the node decides by the session's owner).
	if out, errs, code := execSSH(t, operator, "kill n1/s1"); code != 0 || !strings.Contains(out, "verb=kill role=operator") {
		t.Fatalf("operator kill: %q %q exit %d", out, errs, code)
	}
	if got := <-sf.execs; strings.Join(got, "|") != "kill|n1/s1" {
		t.Fatalf("operator kill ran %q", got)
	}
	for _, cmd := range []string{"try -- id", "dev", "replay /etc/passwd", "ls --addr=http://evil", "ls --token x", `ls 'unterminated`} {
		if _, errs, code := execSSH(t, admin, cmd); code != 2 || errs == "" {
			t.Errorf("%s: exit %d %q, want refused with 2", cmd, code, errs)
		}
	}
	select {
	case got := <-sf.execs:
		t.Fatalf("a refused command reached the CLI: %q", got)
	default:
	}
	// No command and no PTY: a hint, exit 2.
	s, _ := testutil.SSHSession(admin, time.Minute)
	var errb bytes.Buffer
	s.Stderr = &errb
	s.Shell()
	err := s.Wait()
	if ee, ok := err.(*ssh.ExitError); !ok || ee.ExitStatus() != 2 || !strings.Contains(errb.String(), "help") {
		t.Fatalf("shell without a pty: %v %q", err, errb.String())
	}
	// Forwarding, env and subsystems are refused; the connection stays usable.
	if _, err := admin.Dial("tcp", "127.0.0.1:22"); err == nil {
		t.Error("port forwarding was allowed")
	}
	if _, _, err := admin.SendRequest("tcpip-forward", true, ssh.Marshal(struct {
		Addr string
		Port uint32
	}{"127.0.0.1", 0})); err != nil {
		t.Errorf("tcpip-forward request: %v", err)
	}
	s, _ = testutil.SSHSession(admin, time.Minute)
	if err := s.Setenv("LD_PRELOAD", "x"); err == nil {
		t.Error("env was accepted")
	}
	if err := s.RequestSubsystem("sftp"); err == nil {
		t.Error("the sftp subsystem was accepted")
	}
	s.Close()
	if out, _, code := execSSH(t, admin, "help"); code != 0 || !strings.Contains(out, "verb=help") {
		t.Fatalf("after refusals: %q %d", out, code)
	}
}

// term is an SSH attach with a PTY, collecting its output.
type term struct {
	s    *ssh.Session
	in   io.WriteCloser
	mu   sync.Mutex
	out  bytes.Buffer
	done chan error
}

func (sf *sshFixture) attachTerm(t *testing.T, c *ssh.Client, cmd string, rows, cols int) *term {
	t.Helper()
	s, err := testutil.SSHSession(c, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tm := &term{s: s, done: make(chan error, 1)}
	s.Stdout = writerFunc(func(p []byte) (int, error) { tm.mu.Lock(); defer tm.mu.Unlock(); return tm.out.Write(p) })
	s.Stderr = s.Stdout
	if tm.in, err = s.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.RequestPty("xterm", rows, cols, ssh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	if cmd == "" {
		err = s.Shell()
	} else {
		err = s.Start(cmd)
	}
	if err != nil {
		t.Fatal(err)
	}
	go func() { tm.done <- s.Wait() }()
	t.Cleanup(func() { s.Close() })
	return tm
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (tm *term) has(s string) func() bool {
	return func() bool { tm.mu.Lock(); defer tm.mu.Unlock(); return strings.Contains(tm.out.String(), s) }
}

func TestSSHAttach(t *testing.T) {
	sf := newSSHFixture(t)
	s := sf.NewSession("n1")
	sf.Run("n1", s.ID, "echo before-attach")
	op := sf.attachTerm(t, sf.login(t, "n1+"+s.ID, "operator"), "", 40, 120)
	view := sf.attachTerm(t, sf.login(t, "me", "viewer"), "attach n1/"+s.ID, 24, 80)
	testutil.Eventually(t, 10*time.Second, op.has("before-attach"), "the operator's screen")
	testutil.Eventually(t, 10*time.Second, view.has("before-attach"), "the viewer's screen")

	// A window change resizes the session: stty size inside shows it.
	if err := op.s.WindowChange(33, 111); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		var got api.Session
		sf.Must(200, "GET", "/v1/sessions/n1/"+s.ID, nil, &got)
		return got.Rows == 33 && got.Cols == 111
	}, "the resize")
	io.WriteString(op.in, "stty size; echo typed-$((6*7))\r")
	testutil.Eventually(t, 10*time.Second, op.has("33 111"), "stty size in the operator's terminal")
	// Both see the same output.
	testutil.Eventually(t, 10*time.Second, view.has("typed-42"), "the viewer sees the operator's command")

	// A viewer's keystrokes are refused with a notice, and reach nothing.
	io.WriteString(view.in, "echo from-viewer\r")
	testutil.Eventually(t, 10*time.Second, view.has("read-only (viewer role)"), "the viewer's notice")
	// The operator typed last and holds the writer lease for a few seconds: the
	// admin takes it over to run.
	sf.Must(200, "POST", "/v1/sessions/n1/"+s.ID+"/take_over", nil, nil)
	sf.Run("n1", s.ID, "echo marker")
	var raw []byte
	_, raw = sf.Do("GET", "/v1/sessions/n1/"+s.ID+"/output?from=0", nil)
	if strings.Contains(string(raw), "from-viewer") {
		t.Fatal("a viewer's input reached the session")
	}

	// Ctrl-] detaches; the session keeps running.
	io.WriteString(view.in, "\x1d")
	select {
	case err := <-view.done:
		if err != nil {
			t.Fatalf("detach: exit %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the viewer did not detach")
	}
	if !view.has("[detached from n1/" + s.ID + "]")() {
		t.Fatal("no detach notice")
	}
	var got api.Session
	sf.Must(200, "GET", "/v1/sessions/n1/"+s.ID, nil, &got)
	if got.State == "exited" {
		t.Fatal("detaching ended the session")
	}
	// Closing the connection detaches too.
	op.s.Close()
	<-op.done
	sf.Must(200, "GET", "/v1/sessions/n1/"+s.ID, nil, &got)
	if got.State == "exited" {
		t.Fatal("closing the connection ended the session")
	}

	// The session's exit ends an attach with its exit status.
	ex := sf.attachTerm(t, sf.login(t, "n1+"+s.ID, "admin"), "", 24, 80)
	testutil.Eventually(t, 10*time.Second, ex.has("marker"), "the screen")
	io.WriteString(ex.in, "exit 7\r")
	select {
	case err := <-ex.done:
		if ee, ok := err.(*ssh.ExitError); !ok || ee.ExitStatus() != 7 {
			t.Fatalf("attach to an exiting session: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("attach did not end with the session")
	}

	// Attach and detach are audited.
	b, _ := os.ReadFile(sf.audit)
	var actions []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r api.AuditRecord
		if json.Unmarshal([]byte(l), &r) == nil {
			actions = append(actions, r.Action)
		}
	}
	joined := strings.Join(actions, ",")
	for _, want := range []string{"ssh login", "ssh attach", "ssh detach"} {
		if !strings.Contains(joined, want) {
			t.Errorf("audit lacks %q: %s", want, joined)
		}
	}
}

func TestSSHMenu(t *testing.T) {
	sf := newSSHFixture(t)
	s := sf.NewSession("n1")
	sf.Run("n1", s.ID, "echo in-menu-session")
	tm := sf.attachTerm(t, sf.login(t, "me", "operator"), "", 24, 100)
	testutil.Eventually(t, 10*time.Second, tm.has("attach to [number]"), "the menu")
	if !tm.has("n1/" + s.ID)() {
		t.Fatal("the menu does not list the session")
	}
	io.WriteString(tm.in, "1\r")
	testutil.Eventually(t, 10*time.Second, tm.has("in-menu-session"), "the attached screen")
	io.WriteString(tm.in, "\x1d")
	testutil.Eventually(t, 10*time.Second, func() bool {
		tm.mu.Lock()
		defer tm.mu.Unlock()
		return strings.Count(tm.out.String(), "attach to [number]") >= 2
	}, "the menu again after a detach")
	io.WriteString(tm.in, "q\r")
	select {
	case err := <-tm.done:
		if err != nil {
			t.Fatalf("quit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not end the menu")
	}
}

// TestSSHLimits: connections beyond the per-address burst are refused, as are
// connections beyond the cap.
func TestSSHLimits(t *testing.T) {
	sf := newSSHFixture(t)
	refused := 0
	for range 30 { // the burst is 20 (one more per 200 ms)
		c, err := sf.dial(t, "me", ssh.PublicKeys(sf.keys["viewer"]))
		if err != nil {
			refused++
			continue
		}
		c.Close()
	}
	if refused == 0 {
		t.Fatal("30 connections at once from one address were all accepted")
	}
}

// TestSSHRoleReachesTheNode: requests made for an SSH user are signed with the
// key's role: the node audits an operator's resize with the operator role and the
// key as the actor.
func TestSSHRoleReachesTheNode(t *testing.T) {
	sf := newSSHFixture(t)
	_, recs := testutil.AuditSub(t, sf.Stack.NATS.ClientURL(), "n1")
	s := sf.NewSession("n1")
	sf.attachTerm(t, sf.login(t, "n1+"+s.ID, "operator"), "", 40, 120) // resizes the session to its window
	r := testutil.NextAudit(t, recs, "resize")
	if r.Result != "ok" || r.Role != api.RoleOperator || r.Controller != "ctl" || !strings.HasPrefix(r.Actor, "ssh:") {
		t.Fatalf("audit record of the operator's resize: %+v", r)
	}
}
