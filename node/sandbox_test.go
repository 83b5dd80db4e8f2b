package node_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/node"
)

// sandboxPolicy: sessions labelled box=yes write only work, without network,
// with 64 pids and 256 MiB; "web" may connect to port 443 only.
func sandboxPolicy(work string) string {
	return fmt.Sprintf(`version: 1
rules:
  - name: default
    action: allow
sandboxes:
  profiles:
    workonly:
      files: {write: [%s]}
      network: none
      limits: {memory: 256MiB, pids: 64}
    web:
      network: {connect_tcp: [443]}
  rules:
    - match: {session_labels: {box: 'yes'}}
      profile: workonly
  default: none
`, work)
}

func TestSandboxChosenByPolicy(t *testing.T) {
	if c := sandbox.Probe(); c.Landlock < 4 || !c.NetNS || c.Cgroups == 0 {
		t.Skipf("needs root, Landlock ABI >= 4 and cgroups: %+v", c)
	}
	work := t.TempDir()
	f, _ := guardFixture(t, sandboxPolicy(work), 3)
	_, audits := testutil.AuditSub(t, f.srv.ClientURL(), "n1")
	s := f.create(api.CreateRequest{Shell: "bash", Cwd: work, Labels: map[string]string{"box": "yes"}})
	if s.Sandbox == nil || s.Sandbox.Name != "workonly" {
		t.Fatalf("session %+v, want sandbox workonly", s.Sandbox)
	}
	if r := testutil.NextAudit(t, audits, "create"); !strings.Contains(r.Detail, "sandbox workonly") {
		t.Fatalf("create audit %+v does not name the sandbox", r)
	}
	outside := t.TempDir()
	if r := f.run(s.ID, "touch "+outside+"/x"); r.Block.ExitCode == nil || *r.Block.ExitCode != 1 || !strings.Contains(r.Text, "Permission denied") {
		t.Fatalf("write outside the profile: %+v %q", r.Block.ExitCode, r.Text)
	}
	if r := f.run(s.ID, "touch "+work+"/x"); r.Block.ExitCode == nil || *r.Block.ExitCode != 0 {
		t.Fatalf("write inside the profile: %+v %q", r.Block.ExitCode, r.Text)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Fatal("the write outside happened")
	}
	var got api.Session
	f.mustCall("get", api.SessionRequest{Session: s.ID}, &got)
	if got.Sandbox == nil || got.Sandbox.Name != "workonly" {
		t.Fatalf("get: sandbox %+v", got.Sandbox)
	}

	// Asking: stricter is taken, looser refused, unknown a bad request.
	plain := f.create(api.CreateRequest{Shell: "bash", Cwd: work, Sandbox: "web"})
	if plain.Sandbox == nil || plain.Sandbox.Name != "web" {
		t.Fatalf("asked web: %+v", plain.Sandbox)
	}
	if err := f.call("create", api.CreateRequest{Shell: "bash", Labels: map[string]string{"box": "yes"}, Sandbox: "web"}, nil); code(err) != api.CodeSandbox {
		t.Fatalf("a looser profile: %v", err)
	}
	if err := f.call("create", api.CreateRequest{Shell: "bash", Labels: map[string]string{"box": "yes"}, Sandbox: "none"}, nil); code(err) != api.CodeBadRequest {
		t.Fatalf("no profile under a choice: %v", err)
	}
}

// TestSandboxFailsClosed: a node whose kernel (simulated) lacks Landlock ABI 4
// refuses a session whose profile limits TCP ports; nothing starts.
func TestSandboxFailsClosed(t *testing.T) {
	work := t.TempDir()
	src := &docSource{rev: 1, doc: []byte(sandboxPolicy(work))}
	f := newFixture(t, func(c *node.Config) {
		c.Policy = src
		c.SandboxCaps = &api.SandboxCaps{Landlock: 3, NetNS: true, Cgroups: 1}
	})
	err := f.call("create", api.CreateRequest{Shell: "bash", Cwd: work, Sandbox: "web"}, nil)
	if code(err) != api.CodeSandbox || !strings.Contains(err.Error(), "ABI 4") {
		t.Fatalf("create on a kernel without TCP rules: %v", err)
	}
	if n := len(f.listSessions()); n != 0 {
		t.Fatalf("%d sessions started", n)
	}
	// Without the profile the create works.
	f.create(api.CreateRequest{Shell: "bash", Cwd: work})
}

// holderAttackEnv makes this test binary, run from a session, the attacker of
// the holder: it dials the holder in the directory the variable names with
// fleetmux's own client (which reads the holder's key there, when it can) and
// asks for the sessions; it prints HOLDER-SERVED or HOLDER-REFUSED.
const holderAttackEnv = "FM_NODE_TEST_HOLDER_ATTACK"

func init() {
	dir := os.Getenv(holderAttackEnv)
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := holder.Dial(ctx, dir)
	if err == nil {
		var l []holder.Info
		if l, err = c.List(ctx); err == nil {
			fmt.Printf("HOLDER-SERVED %d sessions\n", len(l))
			os.Exit(0)
		}
	}
	fmt.Printf("HOLDER-REFUSED %v\n", err)
	os.Exit(0)
}

// TestSessionsKeptOutOfDataDir performs the attacks of a session without a
// profile, as the node's own user (root), on the node's secrets: it cats
// <data>/creds/node.creds, lists the data dir, and dials the holder (in
// <data>/holder) to list every session. Each fails, by default, while the
// session keeps writing outside the data dir and the node keeps using its
// holder. On the old code (hiding opt-in) it read the creds and was served.
func TestSessionsKeptOutOfDataDir(t *testing.T) {
	if sandbox.Probe().Landlock < 1 || os.Geteuid() != 0 {
		t.Skip("needs Landlock and root")
	}
	var hdir string
	f := newFixture(t, func(c *node.Config) {
		hdir = filepath.Join(c.DataDir, "holder")
		c.Holder = startHolderIn(t, hdir)()
	})
	creds := filepath.Join(f.data, "creds")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "node.creds"), []byte("SECRET-NKEY-SEED"), 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	s := f.create(api.CreateRequest{Shell: "bash", Cwd: work})
	if s.Sandbox != nil {
		t.Fatalf("a session without a profile: %+v", s.Sandbox)
	}
	r := f.run(s.ID, "cat "+filepath.Join(creds, "node.creds")+" && echo creds=read; ls -A "+f.data+"; "+holderAttackEnv+"="+hdir+" "+self+"; echo x > "+work+"/ok && cat "+work+"/ok")
	if strings.Contains(r.Text, "SECRET") || strings.Contains(r.Text, "creds=read") || strings.Contains(r.Text, "HOLDER-SERVED") ||
		!strings.Contains(r.Text, "HOLDER-REFUSED") || !strings.HasSuffix(r.Text, "x") {
		t.Fatalf("the session read the data dir or reached the holder, or could not write its own: %q", r.Text)
	}
	t.Logf("the attacks from a plain session: %q", r.Text)
	// The same attacker outside a session is served: the attack is real.
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), holderAttackEnv+"="+hdir)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "HOLDER-SERVED 1 sessions") {
		t.Fatalf("the attacker outside a session: %v %s", err, out)
	}
	// The node still spawns in its holder.
	s2 := f.create(api.CreateRequest{Shell: "bash", Cwd: work})
	if r := f.run(s2.ID, "echo fine"); r.Text != "fine" {
		t.Fatalf("a second session: %q", r.Text)
	}
}

// TestSandboxInHolderWithGuard: a profile's session in a holder under a policy
// passes the nonce, the guard channel (and its kept end) and the sandbox's two
// pipes in one message.
func TestSandboxInHolderWithGuard(t *testing.T) {
	if c := sandbox.Probe(); c.Landlock < 4 || !c.NetNS || c.Cgroups == 0 {
		t.Skipf("needs root, Landlock ABI >= 4 and cgroups: %+v", c)
	}
	work := t.TempDir()
	hdir := filepath.Join(t.TempDir(), "holder")
	client := startHolderIn(t, hdir)
	src := &docSource{rev: 1, doc: []byte(sandboxPolicy(work))}
	f := newFixture(t, func(c *node.Config) { c.Holder = client(); c.Policy = src })
	s := f.create(api.CreateRequest{Shell: "bash", Cwd: work, Labels: map[string]string{"box": "yes"}})
	if s.Sandbox == nil || s.Sandbox.Name != "workonly" {
		t.Fatalf("sandbox %+v", s.Sandbox)
	}
	if r := f.run(s.ID, "touch /etc/fm-sandbox-x"); r.Block.ExitCode == nil || *r.Block.ExitCode != 1 {
		t.Fatalf("touch /etc: %+v %q", r.Block.ExitCode, r.Text)
	}
	if r := f.run(s.ID, "cat "+f.data+"/next-session-id && echo read"); strings.Contains(r.Text, "read") || !strings.Contains(r.Text, "No such file") {
		t.Fatalf("the data dir: %q", r.Text)
	}
	// The holder from inside the sandbox (its directory is not in the data
	// dir here): refused.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := f.run(s.ID, holderAttackEnv+"="+hdir+" "+self)
	if !strings.Contains(r.Text, "HOLDER-REFUSED") {
		t.Fatalf("the holder from a sandboxed session: %q", r.Text)
	}
	t.Logf("the attack from a sandboxed session: %q", r.Text)
}

// metaSink is a Gossip that keeps the last metadata.
type metaSink struct {
	mu   sync.Mutex
	last api.NodeMeta
}

func (m *metaSink) UpdateMeta(meta api.NodeMeta) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = meta
	return nil
}

// TestMetaSaysWhatTheNodeEnforces: the node's gossiped metadata (what `fleetmux
// nodes` shows) names what its kernel can enforce.
func TestMetaSaysWhatTheNodeEnforces(t *testing.T) {
	g := &metaSink{}
	f := newFixture(t, func(c *node.Config) {
		c.Gossip = g
		c.SandboxCaps = &api.SandboxCaps{Landlock: 3, Cgroups: 2}
	})
	f.create(api.CreateRequest{Shell: "bash"})
	testutil.Eventually(t, 10*time.Second, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.last.Sandbox == "landlock=3 cgroup=2"
	}, "the metadata to name the sandbox caps")
	if s := (api.SandboxCaps{}).String(); s != "none" {
		t.Fatalf("no caps: %q", s)
	}
}
