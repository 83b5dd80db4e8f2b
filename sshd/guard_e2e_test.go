package sshd_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/internal/testutil/stack"
	"github.com/fleetmux/fleetmux/sshd"
)

// TestSSHGuardTypedLines: through the real stack (controller, NATS, node, policy in
// FLEETMUX_POLICY), a line the policy denies does not run in a bash or a zsh session,
// whether it comes by the API's input or is typed in an SSH attach (x/crypto/ssh), in
// one piece (the node refuses the input) or rearranged by the line editor so that
// only the shell sees the real line (C-a: the shell's own check refuses it); the
// attach shows the rule's name, and allowed lines typed there run.
func TestSSHGuardTypedLines(t *testing.T) {
	f := stack.New(t, stack.Options{Nodes: map[string]map[string]string{"n1": nil}, Policy: true})
	f.Must(http.StatusOK, "PUT", "/v1/policy", []byte(`{"version": 1, "rules": [{"name": "no-markers", "match": {"command": "touch\\s+\\S*marker"}, "action": "deny"}, {"name": "default", "action": "allow"}]}`), nil)
	dir := t.TempDir()
	key := newSigner(t)
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, []byte("role=operator "+string(ssh.MarshalAuthorizedKey(key.PublicKey()))), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := sshd.Start(sshd.Config{
		Listen: "127.0.0.1:0", HostKeyFile: filepath.Join(dir, "host_key"), AuthorizedKeys: ak, Fleet: f.Ctl, Logger: stack.Quiet(),
		Exec: func(context.Context, []string, string, string, io.Reader, io.Writer, io.Writer) int { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	sf := &sshFixture{Stack: f, srv: srv, keys: map[string]ssh.Signer{"operator": key}}
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			if _, err := exec.LookPath(shell); err != nil {
				t.Skipf("%s: %v", shell, err)
			}
			work := t.TempDir()
			var s api.Session
			f.Must(http.StatusCreated, "POST", "/v1/sessions", api.NewSession{Node: "n1", CreateRequest: api.CreateRequest{Shell: shell, Cwd: work}}, &s)
			base := "/v1/sessions/n1/" + s.ID
			var w api.WaitResult
			if f.Must(http.StatusOK, "GET", base+"/wait?until=idle&timeout_ms=10000", nil, &w); !w.OK {
				t.Fatalf("session not idle: %+v", w.Session)
			}
			testutil.Eventually(t, 10*time.Second, func() bool {
				code, _ := f.Do("POST", base+"/run", api.RunBody{Command: "touch probe-marker", TimeoutMS: 5000})
				return code == http.StatusForbidden
			}, "the node to enforce the policy")
			blocks := func() []api.Block {
				var l api.BlockList
				f.Must(http.StatusOK, "GET", base+"/blocks", nil, &l)
				return l.Blocks
			}
			screen := func() string {
				var sc api.Screen
				f.Must(http.StatusOK, "GET", base+"/screen", nil, &sc)
				return sc.Text
			}
			absent := func(name string) {
				t.Helper()
				if _, err := os.Stat(filepath.Join(work, name)); err == nil {
					t.Fatalf("%s exists: a denied line ran", name)
				}
			}
			// The API's input: whole, the node refuses it; rearranged, the shell does.
			if e := f.APIErr(http.StatusForbidden, api.CodeDenied, "POST", base+"/input", api.InputBody{Data: "touch marker-api\r"}); e.Rule != "no-markers" {
				t.Fatalf("input denied by %q", e.Rule)
			}
			n := len(blocks())
			f.Must(http.StatusOK, "POST", base+"/input", api.InputBody{Data: "ouch marker-api2\x01t\r"}, nil)
			for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if b := blocks(); len(b) > n && b[n].State == api.BlockDone {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("the typed line's block did not finish: blocks %+v, screen:\n%s", blocks(), screen())
				}
			}
			if b := blocks()[n]; b.ExitCode != nil || b.ExitCodeNote != api.NoteDenied+" no-markers" {
				t.Fatalf("typed line's block: exit %v note %q", b.ExitCode, b.ExitCodeNote)
			}
			absent("marker-api")
			absent("marker-api2")
			// An SSH attach (x/crypto/ssh) typing the same.
			tm := sf.attachTerm(t, sf.login(t, "n1+"+s.ID, "operator"), "", 24, 100)
			// The API's input holds the writer lease for a moment: Ctrl-T takes it over.
			io.WriteString(tm.in, "\x05") // C-e: end of line, types nothing
			refused := false
			for end := time.Now().Add(2 * time.Second); !refused && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				refused = tm.has("input refused: busy")()
			}
			if refused {
				io.WriteString(tm.in, "\x14")
				testutil.Eventually(t, 10*time.Second, tm.has("your keystrokes are sent"), "the take-over:\n%s", tm.text())
			}
			since := func(off int, s string) func() bool {
				return func() bool { txt := tm.text(); return len(txt) > off && strings.Contains(txt[off:], s) }
			}
			off := len(tm.text())
			io.WriteString(tm.in, "touch marker-ssh\r")
			testutil.Eventually(t, 10*time.Second, since(off, "no-markers"), "the attach to name the rule:\n%s", tm.text())
			off = len(tm.text())
			io.WriteString(tm.in, "\x15ouch marker-ssh2\x01t\r")
			testutil.Eventually(t, 10*time.Second, since(off, "fleetmux: denied by rule no-markers"), "the shell to say why in the attach:\n%s", tm.text())
			io.WriteString(tm.in, "touch ok-ssh\r")
			testutil.Eventually(t, 10*time.Second, func() bool { _, err := os.Stat(filepath.Join(work, "ok-ssh")); return err == nil }, "the allowed line typed in the attach to run:\n%s", tm.text())
			absent("marker-ssh")
			absent("marker-ssh2")
		})
	}
}
