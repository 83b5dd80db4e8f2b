package sshd_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"log/slog"

	"golang.org/x/crypto/ssh"
)

// logBuffer is a slog.Handler that keeps every record as text, for tests that
// check what the operator is told.
type logBuffer struct {
	mu    sync.Mutex // guards lines
	lines []string
}

func (l *logBuffer) Enabled(context.Context, slog.Level) bool { return true }
func (l *logBuffer) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logBuffer) WithGroup(string) slog.Handler            { return l }
func (l *logBuffer) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// roleOver logs in with key and returns the role the front door gave it, or the
// login error.
func (sf *sshFixture) roleOver(t *testing.T, key ssh.Signer) (string, error) {
	t.Helper()
	c, err := sf.dial(t, "me", ssh.PublicKeys(key))
	if err != nil {
		return "", err
	}
	defer c.Close()
	out, _, _ := execSSH(t, c, "nodes")
	_, role, _ := strings.Cut(out, "role=")
	role, _, _ = strings.Cut(role, " ")
	return role, nil
}

// TestSSHKeyOptions is the attack of issue 15 #6: authorized_keys options were
// ignored and roles came from the comment, so a line restricted to another
// address and to /bin/false logged in from loopback as admin.
func TestSSHKeyOptions(t *testing.T) {
	sf := newSSHFixture(t)
	line := func(k ssh.Signer) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.PublicKey()))) }
	type keyCase struct {
		opts, comment string
		role          string // "": refused
	}
	cases := []keyCase{
		{`from="10.9.9.9",command="/bin/false"`, "alice role=admin", ""}, // the reported line
		{`from="10.9.9.9"`, "bob role=admin", ""},
		{`command="/bin/false",role=admin`, "carol", ""},
		{`no-pty,role=admin`, "dave", ""},
		{`restrict,role=admin`, "erin", ""},
		{`role=operator`, "mallory role=admin", "operator"}, // the comment is no role
		{``, "eve role=admin fleetmux:admin", "viewer"},     // nor here: the default
		{`from="127.0.0.0/8,!10.0.0.0/8",role=operator`, "", "operator"},
		{`from="127.0.0.?",role=operator`, "", "operator"},
		{`from="!127.0.0.1,*",role=admin`, "", ""},
		{`from="10.0.0.0/8,192.168.*"`, "", ""},
		{`from="127.0.0.1/8",role=admin`, "", ""}, // bits beyond the mask: refused as OpenSSH does
		{`expiry-time="20200101",role=admin`, "", ""},
		{`expiry-time="29991231Z",role=operator`, "", "operator"},
		{`role=superuser`, "", ""},
		{`no-port-forwarding,no-agent-forwarding,no-X11-forwarding,role=operator`, "", "operator"},
	}
	signers := make([]ssh.Signer, len(cases))
	var ak strings.Builder
	for i, c := range cases {
		signers[i] = newSigner(t)
		fmt.Fprintf(&ak, "%s %s %s\n", c.opts, line(signers[i]), c.comment)
	}
	if err := os.WriteFile(sf.ak, []byte(ak.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		role, err := sf.roleOver(t, signers[i])
		switch {
		case c.role == "" && err == nil:
			t.Errorf("line %d %q %q: logged in as %s, want refused", i+1, c.opts, c.comment, role)
		case c.role != "" && err != nil:
			t.Errorf("line %d %q %q: refused (%v), want %s", i+1, c.opts, c.comment, err, c.role)
		case c.role != "" && role != c.role:
			t.Errorf("line %d %q %q: role %s, want %s", i+1, c.opts, c.comment, role, c.role)
		}
	}
	// The operator is told which line was refused and why, never the key.
	logs := sf.logs.String()
	for _, want := range []string{`line=1 why=option "command" is not enforced by fleetmux`, `line=4 why=option "no-pty"`, `line=12 why=from: "127.0.0.1/8" has bits set beyond its mask`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %s:\n%s", want, logs)
		}
	}
	for _, s := range signers {
		k := line(s)
		if strings.Contains(logs, k[strings.Index(k, " ")+1:]) {
			t.Errorf("the log holds key material:\n%s", logs)
		}
	}
	if strings.Count(logs, "line=1 ") != 1 {
		t.Errorf("a refused line is logged at each login, want once per edit:\n%s", logs)
	}
}

// TestSSHHostCertificate is the attack of issue 15 #7: a host certificate signed
// by a user CA, for an allowed principal, logged in as a user.
func TestSSHHostCertificate(t *testing.T) {
	sf := newSSHFixture(t)
	certSigner := func(typ uint32, principals []string, ca ssh.Signer, after, before time.Time) ssh.Signer {
		user := newSigner(t)
		c := &ssh.Certificate{
			Key: user.PublicKey(), CertType: typ, KeyId: "carol@example", ValidPrincipals: principals,
			ValidAfter: uint64(after.Unix()), ValidBefore: uint64(before.Unix()),
		}
		if err := c.SignCert(rand.Reader, ca); err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewCertSigner(c, user)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := time.Now()
	ca := sf.keys["ca"]
	if role, err := sf.roleOver(t, certSigner(ssh.UserCert, []string{"carol"}, ca, now.Add(-time.Minute), now.Add(time.Hour))); err != nil || role != "operator" {
		t.Fatalf("a good user certificate: role %q, %v", role, err)
	}
	for name, s := range map[string]ssh.Signer{
		"host certificate":      certSigner(ssh.HostCert, []string{"carol"}, ca, now.Add(-time.Minute), now.Add(time.Hour)),
		"not yet valid":         certSigner(ssh.UserCert, []string{"carol"}, ca, now.Add(time.Hour), now.Add(2*time.Hour)),
		"expired":               certSigner(ssh.UserCert, []string{"carol"}, ca, now.Add(-2*time.Hour), now.Add(-time.Hour)),
		"no principal":          certSigner(ssh.UserCert, nil, ca, now.Add(-time.Minute), now.Add(time.Hour)),
		"another principal":     certSigner(ssh.UserCert, []string{"mallory"}, ca, now.Add(-time.Minute), now.Add(time.Hour)),
		"signed by another key": certSigner(ssh.UserCert, []string{"carol"}, sf.keys["stranger"], now.Add(-time.Minute), now.Add(time.Hour)),
		"signed by a user key":  certSigner(ssh.UserCert, []string{"carol"}, sf.keys["admin"], now.Add(-time.Minute), now.Add(time.Hour)),
	} {
		if role, err := sf.roleOver(t, s); err == nil {
			t.Errorf("%s: logged in as %s", name, role)
		}
	}
}
