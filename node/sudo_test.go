package node_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// everything records every message the node publishes under the fleetmux prefix
// (output, events, blocks, audit, approvals; not the requests to it) for grepping.
type everything struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (f *fixture) everything(t *testing.T) *everything {
	nc, err := nats.Connect(f.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ev := &everything{}
	if _, err := nc.Subscribe(api.DefaultPrefix+".>", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, api.DefaultPrefix+".rpc.") {
			return // a request (secret_set carries the secret to the node)
		}
		ev.mu.Lock()
		ev.buf.Write(m.Data)
		ev.buf.WriteByte('\n')
		ev.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ev
}

func (e *everything) bytes() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return bytes.Clone(e.buf.Bytes())
}

// TestSudoSecret: `sudo -k; sudo id -u` as a user who must type their password
// prints 0 with the password typed by the node from a stored secret, because the
// policy lets the run's writer use it; the secret's bytes appear nowhere: not in a
// reply, the NATS messages (stream, events, audit), the recording, the screen. A
// prompt a program of the user prints is not answered, and a wrong secret is typed
// once, not again at the next prompt.
func TestSudoSecret(t *testing.T) {
	var b [12]byte
	rand.Read(b[:])
	secret := "Fm-" + hex.EncodeToString(b[:])
	user := testutil.SudoUser(t, secret)
	f, _ := guardFixture(t, "version: 1\nsecrets:\n  - {name: sudo-test, roles: [admin]}\n", 1)
	all := f.everything(t)
	_, audits := testutil.AuditSub(t, f.srv.ClientURL(), "n1")
	var replies bytes.Buffer
	call := func(verb string, req, out any) {
		t.Helper()
		var raw json.RawMessage
		f.mustCall(verb, req, &raw)
		replies.Write(raw)
		if out != nil {
			json.Unmarshal(raw, out)
		}
	}

	var info api.SecretInfo
	call("secret_set", api.SecretSetRequest{Name: "sudo-test", Value: secret}, &info)
	if info.Name != "sudo-test" || info.Node != "n1" {
		t.Fatalf("secret_set: %+v", info)
	}
	st, err := os.Stat(filepath.Join(f.data, "secrets", "sudo-test"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the stored secret: %v %v", st, err)
	}
	if d, err := os.Stat(filepath.Join(f.data, "secrets")); err != nil || d.Mode().Perm() != 0o700 {
		t.Fatalf("the secrets dir: %v %v", d, err)
	}
	var list api.SecretList
	call("secret_ls", struct{}{}, &list)
	if len(list.Secrets) != 1 || list.Secrets[0].Name != "sudo-test" {
		t.Fatalf("secret_ls: %+v", list)
	}

	s := f.create(api.CreateRequest{Shell: "bash", User: user})
	var res api.BlockResult
	call("run", api.RunRequest{Session: s.ID, Command: "sudo -k; sudo id -u", TimeoutMS: 20000}, &res)
	lines := strings.Split(strings.TrimSpace(res.Text), "\n")
	if res.Block.ExitCode == nil || *res.Block.ExitCode != 0 || lines[len(lines)-1] != "0" {
		t.Fatalf("sudo id -u: %q exit %s", res.Text, exitOf(res))
	}
	if rec := testutil.NextAudit(t, audits, "secret"); rec.Result != "ok" || rec.Session != s.ID || rec.Principal == "" ||
		!strings.Contains(rec.Detail, "sudo-test") || !strings.Contains(rec.Detail, "sudo") {
		t.Fatalf("the secret's audit record: %+v", rec)
	}

	// A stored secret that reaches the output anyway (typed where echo is on) is
	// redacted as a literal.
	call("run", api.RunRequest{Session: s.ID, Command: "echo " + secret, TimeoutMS: 20000}, &res)
	if res.Text != "[REDACTED:secret-sudo-test]" {
		t.Fatalf("a secret echoed: %q", res.Text)
	}

	// A prompt the user's own program prints (echo off too) is not answered, even
	// when that program is named sudo: it does not run set-user-ID.
	call("run", api.RunRequest{Session: s.ID, Command: "d=$(mktemp -d); cp /bin/bash $d/sudo; $d/sudo -c \"read -s -p '[sudo] password for " + user + ": ' v; echo got-\\${#v}\"", TimeoutMS: 1500}, &res)
	if res.Block.State != api.BlockRunning {
		t.Fatalf("a fake prompt was answered: %+v %q", res.Block, res.Text)
	}
	f.mustCall("keys", api.KeysRequest{Session: s.ID, Keys: []string{"C-c"}}, nil)
	var wr api.WaitReply
	call("wait", api.WaitRequest{Session: s.ID, Until: api.UntilIdle, TimeoutMS: 10000}, &wr)

	// A wrong secret is typed once: sudo's second prompt waits for a person.
	call("secret_set", api.SecretSetRequest{Name: "sudo-test", Value: "wrong-" + secret[:8]}, nil)
	call("run", api.RunRequest{Session: s.ID, Command: "sudo -k; sudo id -u", TimeoutMS: 1000}, nil)
	testutil.Eventually(t, 20*time.Second, func() bool {
		var scr api.Screen
		f.mustCall("screen", api.SessionRequest{Session: s.ID}, &scr)
		return strings.Count(scr.Text, "password for "+user) >= 2 && scr.WaitingInput
	}, "sudo's second prompt")
	if rec := testutil.NextAudit(t, audits, "secret"); rec.Result != "ok" {
		t.Fatalf("the wrong secret's audit record: %+v", rec)
	}
	f.mustCall("keys", api.KeysRequest{Session: s.ID, Keys: []string{"C-c"}}, nil)
	call("wait", api.WaitRequest{Session: s.ID, Until: api.UntilIdle, TimeoutMS: 10000}, &wr)
	select {
	case rec := <-audits:
		if rec.Action == "secret" {
			t.Fatalf("the wrong secret was typed again: %+v", rec)
		}
	default:
	}

	// A writer the policy does not name gets no secret: the policy names admins
	// only, and the runs below are an operator's.
	call("secret_set", api.SecretSetRequest{Name: "sudo-test", Value: secret}, nil)
	f.role = api.RoleOperator
	call("take_over", api.TakeOverRequest{Session: s.ID}, nil) // the admin's C-c holds the lease
	call("run", api.RunRequest{Session: s.ID, Command: "sudo -k; sudo id -u", TimeoutMS: 1500}, &res)
	if res.Block.State != api.BlockRunning {
		t.Fatalf("an operator's sudo was answered: %+v %q", res.Block, res.Text)
	}
	f.mustCall("keys", api.KeysRequest{Session: s.ID, Keys: []string{"C-c"}}, nil)
	f.role = api.RoleAdmin

	// Nowhere: replies (runs, screens, reads, blocks), every NATS message, the
	// recording, the log of audit records.
	var scr api.Screen
	call("screen", api.SessionRequest{Session: s.ID}, &scr)
	var rr api.ReadReply
	call("read", api.ReadRequest{Session: s.ID, From: 0}, &rr)
	replies.Write(rr.Data)
	var bl api.BlockList
	call("blocks", api.SessionRequest{Session: s.ID}, &bl)
	for _, blk := range bl.Blocks {
		call("block", api.BlockRequest{Session: s.ID, N: blk.N, MaxBytes: -1}, nil)
	}
	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)
	var rec []byte
	filepath.Walk(filepath.Join(f.data, "sessions", s.ID), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			rec = append(rec, b...)
		}
		return nil
	})
	if !bytes.Contains(rec, []byte("password for "+user)) || !bytes.Contains(all.bytes(), []byte("password for "+user)) {
		t.Fatal("the recording or the stream misses sudo's prompt: the search below would prove nothing")
	}
	for what, b := range map[string][]byte{"a reply": replies.Bytes(), "a NATS message": all.bytes(), "the recording": rec} {
		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(secret[3:])) {
			t.Errorf("the secret is in %s", what)
		}
	}
}

// TestSudoSecretOtherReaders: the red-team attacks on the typed secret. A process
// that races sudo for the terminal, left in the foreground process group by a
// subshell (so not a descendant of the shell), or planted by an operator the
// secret does not name as a sudo function that deploy's next sudo runs, would read
// the secret the node types. The node refuses it (audit "secret refused: other
// readers"): the secret is not typed, the racer reads nothing, the prompt waits
// for a person; a plain sudo afterwards is still answered.
func TestSudoSecretOtherReaders(t *testing.T) {
	var b [12]byte
	rand.Read(b[:])
	secret := "Fm-" + hex.EncodeToString(b[:])
	user := testutil.SudoUser(t, secret)
	f, _ := guardFixture(t, "version: 1\nsecrets:\n  - {name: sudo-test, roles: [admin]}\n", 1)
	_, audits := testutil.AuditSub(t, f.srv.ClientURL(), "n1")
	f.mustCall("secret_set", api.SecretSetRequest{Name: "sudo-test", Value: secret}, nil)
	dir, err := os.MkdirTemp("", "fmleak")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	leaked := func(path string) {
		t.Helper()
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			t.Fatalf("the racer read %q from the terminal", b)
		}
	}
	refused := func(s api.Session, leak string) {
		t.Helper()
		rec := testutil.NextAudit(t, audits, "secret")
		if rec.Result != api.CodeDenied || !strings.Contains(rec.Error, "secret refused: other readers") || rec.Session != s.ID {
			t.Fatalf("the secret was not refused: %+v", rec)
		}
		var scr api.Screen
		f.mustCall("screen", api.SessionRequest{Session: s.ID}, &scr)
		if !scr.WaitingInput || !strings.Contains(scr.Text, "password for "+user) {
			t.Fatalf("sudo's prompt does not wait for a person: %q", scr.Text)
		}
		leaked(leak)
		f.mustCall("keys", api.KeysRequest{Session: s.ID, Keys: []string{"C-c"}}, nil)
		f.mustCall("wait", api.WaitRequest{Session: s.ID, Until: api.UntilIdle, TimeoutMS: 10000}, nil)
		leaked(leak)
	}

	// A racer a subshell leaves in the foreground process group.
	leak1 := filepath.Join(dir, "leak1")
	s := f.create(api.CreateRequest{Shell: "bash", User: user})
	var res api.BlockResult
	f.mustCall("run", api.RunRequest{Session: s.ID, TimeoutMS: 1500,
		Command: `sudo -k; ( (head -n1 </dev/tty >` + leak1 + ` &); sudo -p "[sudo] password for ` + user + `: " id -u )`}, &res)
	if res.Block.State != api.BlockRunning {
		t.Fatalf("the racing sudo finished: %+v %q", res.Block, res.Text)
	}
	refused(s, leak1)
	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)

	// A racer an operator plants as a sudo function, which the admin's sudo runs.
	leak2 := filepath.Join(dir, "leak2")
	s = f.create(api.CreateRequest{Shell: "bash", User: user})
	f.role = api.RoleOperator
	f.mustCall("take_over", api.TakeOverRequest{Session: s.ID}, nil)
	f.mustCall("run", api.RunRequest{Session: s.ID, TimeoutMS: 20000,
		Command: `sudo() { ( (head -n1 </dev/tty >` + leak2 + ` &); command sudo "$@" ); }`}, nil)
	f.role = api.RoleAdmin
	f.mustCall("take_over", api.TakeOverRequest{Session: s.ID}, nil)
	f.mustCall("run", api.RunRequest{Session: s.ID, Command: "sudo -k; sudo id -u", TimeoutMS: 1500}, &res)
	if res.Block.State != api.BlockRunning {
		t.Fatalf("the planted sudo finished: %+v %q", res.Block, res.Text)
	}
	refused(s, leak2)

	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil) // ends the racer (of the session)

	// A racer left reading the terminal by an earlier job: it started its read in
	// the foreground, and job control does not stop a read in progress, so it
	// races sudo from a background process group.
	leak3 := filepath.Join(dir, "leak3")
	s = f.create(api.CreateRequest{Shell: "bash", User: user})
	f.mustCall("run", api.RunRequest{Session: s.ID, TimeoutMS: 1500,
		Command: `( (head -n1 </dev/tty >` + leak3 + ` &); sleep 2 ); sudo -k; sudo -p "[sudo] password for ` + user + `: " id -u`}, &res)
	if res.Block.State != api.BlockRunning {
		t.Fatalf("the sudo with a racer in the background finished: %+v %q", res.Block, res.Text)
	}
	refused(s, leak3)
	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)

	// A process outside the session with the terminal open (another session of the
	// same user can open its pts): the terminal's job control does not apply to it,
	// it can read whenever it likes. (It does not read here: it would eat the
	// command typed next.)
	s = f.create(api.CreateRequest{Shell: "bash", User: user})
	f.mustCall("run", api.RunRequest{Session: s.ID, Command: "tty", TimeoutMS: 20000}, &res)
	pts := strings.TrimSpace(res.Text)
	if !strings.HasPrefix(pts, "/dev/pts/") {
		t.Fatalf("tty: %q", res.Text)
	}
	tty, err := os.OpenFile(pts, os.O_RDONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("sleep", "600")
	holder.Stdin = tty
	err = holder.Start()
	tty.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	f.mustCall("run", api.RunRequest{Session: s.ID, Command: "sudo -k; sudo id -u", TimeoutMS: 1500}, &res)
	if res.Block.State != api.BlockRunning {
		t.Fatalf("the sudo with the terminal open outside the session finished: %+v %q", res.Block, res.Text)
	}
	refused(s, filepath.Join(dir, "none"))
	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)

	// The plain sudo is still answered.
	s = f.create(api.CreateRequest{Shell: "bash", User: user})
	f.mustCall("run", api.RunRequest{Session: s.ID, Command: "sudo -k; sudo id -u", TimeoutMS: 20000}, &res)
	lines := strings.Split(strings.TrimSpace(res.Text), "\n")
	if res.Block.ExitCode == nil || *res.Block.ExitCode != 0 || lines[len(lines)-1] != "0" {
		t.Fatalf("sudo id -u: %q exit %s", res.Text, exitOf(res))
	}
	if rec := testutil.NextAudit(t, audits, "secret"); rec.Result != "ok" {
		t.Fatalf("the plain sudo's audit record: %+v", rec)
	}
	f.mustCall("close", api.SessionRequest{Session: s.ID}, nil)
}
