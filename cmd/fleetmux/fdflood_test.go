package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestIdleHTTPFlood is the attack of issue 25 #6: idle unauthenticated HTTP
// connections (one GET /healthz each, kept alive) took every descriptor of the
// controller's process, and its API, NATS, SSH and gossip all failed with EMFILE.
// Here `fleetmux dev` runs in a process of its own with 256 descriptors, and the
// attacker opens 400 connections from 20 addresses. Now the API listener caps its
// connections (in all and per address, an idle one giving way to a new one):
// during the flood a session is created and run, and an SSH user runs a verb.
func TestIdleHTTPFlood(t *testing.T) {
	needBash(t)
	testutil.NeedTool(t, "prlimit")
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the child's dev.json, which runArgs reads
	t.Setenv(envAddr, "")
	t.Setenv(envToken, "")
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, append([]byte("role=operator "), ssh.MarshalAuthorizedKey(key.PublicKey())...), 0o600); err != nil {
		t.Fatal(err)
	}
	data := "data"
	endHolder(t, data)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("prlimit", "--nofile=256:256", exe, "dev", "--data", data, "--name", "here",
		"--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0",
		"--ssh-listen", "127.0.0.1:0", "--authorized-keys", ak)
	var errb testutil.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		exited <- cmd.Wait()
		close(lines)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("dev did not stop on SIGTERM; stderr:\n%s", errb.String())
		}
	})
	var httpAddr, sshAddr string
	deadline := time.After(60 * time.Second)
	for httpAddr == "" || sshAddr == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("dev ended:\n%s", errb.String())
			}
			if m := regexp.MustCompile(`HTTP API\s+http://(\S+)`).FindStringSubmatch(l); m != nil {
				httpAddr = m[1]
			}
			if m := regexp.MustCompile(`ssh -p (\d+) 127\.0\.0\.1`).FindStringSubmatch(l); m != nil {
				sshAddr = "127.0.0.1:" + m[1]
			}
		case <-deadline:
			t.Fatalf("dev did not come up:\n%s", errb.String())
		}
	}
	if o, e, err := runArgs(t, "new"); err != nil || o != "here/s1\n" {
		t.Fatalf("new before the flood: %q %s %v", o, e, err)
	}

	// The attack: 400 connections, each with one unauthenticated request, kept.
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	kept := 0
	for i := range 400 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%20))}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", httpAddr)
		if err != nil {
			continue
		}
		idle = append(idle, c)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			continue
		}
		if st, err := bufio.NewReader(c).ReadString('\n'); err == nil && strings.Contains(st, "200") {
			kept++
		}
	}
	t.Logf("%d of 400 idle connections got their answer", kept)

	// Everything else still works meanwhile.
	if o, e, err := runArgs(t, "new"); err != nil || o != "here/s2\n" {
		t.Fatalf("new during the flood: %q %s %v\n%s", o, e, err, errb.String())
	}
	if o, e, err := runArgs(t, "run", "here/s2", "--", "echo flood-$((6*7))"); err != nil || !strings.Contains(o, "flood-42") {
		t.Fatalf("run during the flood: %q %s %v\n%s", o, e, err, errb.String())
	}
	c, err := ssh.Dial("tcp", sshAddr, &ssh.ClientConfig{User: "me", Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("ssh during the flood: %v\n%s", err, errb.String())
	}
	defer c.Close()
	s, err := testutil.SSHSession(c, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.CombinedOutput("ls")
	if err != nil || !strings.Contains(string(o), "here/s2") {
		t.Fatalf("ssh ls during the flood: %q %v\n%s", o, err, errb.String())
	}
	if strings.Contains(errb.String(), "too many open files") {
		t.Errorf("the controller ran out of descriptors:\n%s", errb.String())
	}
}
