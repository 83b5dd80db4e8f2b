package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
	"golang.org/x/crypto/ssh"
)

// TestSSHWaitFlood is the attack of issue 15 #5: a viewer opened 300 channels of
// `wait NODE/ID --until exited --timeout 10m` on one SSH connection (and more
// connections after it), and the node answered everyone else `busy` for ten
// minutes. Now one connection holds at most 10 channels, one actor at most 64 long
// requests on a node, and a node keeps room for short verbs: an operator's run and
// ls go through during the flood and after the attacker left.
func TestSSHWaitFlood(t *testing.T) {
	dir := t.TempDir()
	signer := func() (ssh.Signer, []byte) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		return s, ssh.MarshalAuthorizedKey(s.PublicKey())
	}
	viewer, vpub := signer()
	operator, opub := signer()
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, append(append([]byte("role=viewer "), vpub...), append([]byte("role=operator "), opub...)...), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startDev(t, "--ssh-listen", "127.0.0.1:0", "--authorized-keys", ak)
	m := regexp.MustCompile(`ssh -p (\d+) 127\.0\.0\.1`).FindStringSubmatch(devOut)
	if m == nil {
		t.Fatalf("dev did not print its SSH address:\n%s", devOut)
	}
	sshAddr := "127.0.0.1:" + m[1]
	dial := func(key ssh.Signer) *ssh.Client {
		t.Helper()
		c, err := ssh.Dial("tcp", sshAddr, &ssh.ClientConfig{User: "me", Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if out, _, err := runArgs(t, "new", "--addr", addr); err != nil || out != "here/s1\n" {
		t.Fatalf("new: %q %v", out, err)
	}

	// The attacker: 300 channels on one connection, then 8 more connections (more
	// waits than one actor may hold on a node).
	var attackers []*ssh.Client
	opened, refused := 0, 0
	ended := make(chan string, 400) // stderr of each wait that ended
	start := func(c *ssh.Client, n int) {
		for range n {
			s, err := testutil.SSHSession(c, time.Minute)
			if err != nil {
				refused++
				continue
			}
			errb := new(bytes.Buffer)
			s.Stderr = errb
			if err := s.Start("wait here/s1 --until exited --timeout 10m"); err != nil {
				t.Fatal(err)
			}
			go func() { // ends with the session (the attacker's connections close below)
				s.Wait()
				ended <- errb.String()
			}()
			opened++
		}
	}
	first := dial(viewer)
	attackers = append(attackers, first)
	start(first, 300)
	for range 8 {
		c := dial(viewer)
		attackers = append(attackers, c)
		start(c, 10)
	}
	if opened > 90 || refused < 250 {
		t.Errorf("the attacker opened %d channels (%d refused)", opened, refused)
	}
	// Waits beyond what one actor may hold on a node are refused at once.
	busy := 0
	deadline := time.After(30 * time.Second)
	for busy < opened-64 {
		select {
		case e := <-ended:
			if strings.Contains(e, "long requests (run, wait) of yours") {
				busy++
			}
		case <-deadline:
			t.Fatalf("%d of the attacker's %d waits refused busy, want %d", busy, opened, opened-64)
		}
	}

	// An operator still runs commands, at once.
	run := func(when string) {
		t.Helper()
		c := dial(operator)
		defer c.Close()
		s, err := testutil.SSHSession(c, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var out, errb bytes.Buffer
		s.Stdout, s.Stderr = &out, &errb
		began := time.Now()
		if err := s.Run("run here/s1 -- 'echo still-$((6*7))'"); err != nil || out.String() != "still-42\n" {
			t.Fatalf("%s: operator's run: %q %q %v", when, out.String(), errb.String(), err)
		}
		t.Logf("%s: the operator's run took %v", when, time.Since(began))
	}
	run("during the flood")
	for _, c := range attackers {
		c.Close()
	}
	run("after the attacker left")
	if out, _, err := runArgs(t, "ls", "--addr", addr); err != nil || !strings.Contains(out, "here/s1") {
		t.Fatalf("ls after the flood: %q %v", out, err)
	}
}
