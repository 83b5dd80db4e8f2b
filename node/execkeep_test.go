package node_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/keeper"
	"github.com/fleetmux/fleetmux/node"
)

// mkfifos makes named pipes in dir, one per name.
func mkfifos(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := syscall.Mkfifo(filepath.Join(dir, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// release writes a line to the fifo a program waits on (it blocks until the
// program opens it).
func release(t *testing.T, fifo string) {
	t.Helper()
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// endKeepers ends what runs of the background execs in dir (a test that failed
// half-way leaves none behind).
func endKeepers(t *testing.T, dir string) {
	xs, _ := keeper.Scan(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, x := range xs {
		x.Kill()
		x.Wait(ctx)
	}
}

// readStream reads a whole stream of an exec with exec_output from offset 0:
// what it returns (gaps skipped), and the last reply.
func (f *fixture) readStream(id, stream string) (string, api.ExecOutput) {
	f.t.Helper()
	var all strings.Builder
	var out api.ExecOutput
	for from := int64(0); ; {
		f.mustCall(api.VerbExecOutput, api.ExecOutputRequest{ExecID: id, Stream: stream, From: from}, &out)
		all.WriteString(out.Data)
		if out.Next >= out.End || out.Next <= from {
			return all.String(), out
		}
		from = out.Next
	}
}

// TestExecBackgroundAcrossRestart: background execs outlive their node agent.
// One writes to stdout and stderr, the agent goes away (with a holder, as after
// a crash: nothing ends the exec), the program writes 5 MB more (more chunks than
// are kept) while no agent runs, and a new agent on the same data dir finds it:
// exec_get, exec_output and exec_wait give both streams apart and whole (the
// head, the tail, the count) and its exit code 7, though the new agent is not its
// parent. A second one is ended by its owner's DELETE after the restart (not by
// another principal's), and reports SIGKILL; one that ended before the restart
// is still found, and after one more restart all three are. On the old code,
// the new agent knew none of them ("no exec").
func TestExecBackgroundAcrossRestart(t *testing.T) {
	client := startHolder(t)
	f := newFixture(t, func(c *node.Config) { c.Holder = client() })
	t.Cleanup(func() { endKeepers(t, filepath.Join(f.data, "execs")) })
	work := t.TempDir()
	mkfifos(t, work, "go1", "go2")
	const bulk = 5_000_000
	script := `printf 'out1\n'; printf 'err1\n' >&2; read x < go1; ` +
		`head -c 5000000 /dev/zero | tr '\0' a; printf '\nout2\n'; printf 'err2\n' >&2; : > written; read x < go2; exit 7`
	var a, b, c api.ExecResult
	f.mustCall(api.VerbExec, api.ExecRequest{Command: script, Cwd: work, Background: true, TimeoutMS: 1}, &a)
	f.mustCall(api.VerbExec, api.ExecRequest{Command: "echo started; exec sleep 300", Background: true, TimeoutMS: 1}, &b)
	f.mustCall(api.VerbExec, api.ExecRequest{Command: "echo done3; echo e3 >&2; exit 3", Background: true, TimeoutMS: 1}, &c)
	if a.State != api.ExecRunning || !a.Background {
		t.Fatalf("background exec: %+v", a)
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		var g api.ExecResult
		f.mustCall(api.VerbExecGet, api.ExecTarget{ExecID: a.ExecID}, &g)
		return g.Stdout == "out1\n" && g.Stderr == "err1\n"
	}, "the first output")
	testutil.Eventually(t, 20*time.Second, func() bool {
		var g api.ExecResult
		f.mustCall(api.VerbExecGet, api.ExecTarget{ExecID: b.ExecID}, &g)
		return g.Stdout == "started\n"
	}, "the sleeper to start")
	var cw api.ExecResult
	f.mustCall(api.VerbExecWait, api.ExecTarget{ExecID: c.ExecID}, &cw)
	if cw.ExitCode == nil || *cw.ExitCode != 3 {
		t.Fatalf("exec that ends before the restart: %+v", cw)
	}
	for _, id := range []string{a.ExecID, b.ExecID, c.ExecID} {
		st, err := os.Stat(filepath.Join(f.data, "execs", id))
		if err != nil || st.Mode().Perm() != 0o700 {
			t.Fatalf("exec dir %s: %v %v", id, st, err)
		}
	}

	// The agent goes; the program goes on writing with no agent there.
	if err := f.node.Close(); err != nil {
		t.Fatal(err)
	}
	release(t, filepath.Join(work, "go1"))
	testutil.Eventually(t, 20*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(work, "written"))
		return err == nil
	}, "the program to write while no agent runs")
	f.restart(client(), 0, 0)

	// The new agent finds all three: a still running.
	var g api.ExecResult
	f.mustCall(api.VerbExecGet, api.ExecTarget{ExecID: a.ExecID}, &g)
	if g.State != api.ExecRunning || !g.Background {
		t.Fatalf("after the restart: %+v", g)
	}
	release(t, filepath.Join(work, "go2"))
	f.mustCall(api.VerbExecWait, api.ExecTarget{ExecID: a.ExecID, MaxOutputBytes: 64}, &g)
	wantOut := int64(len("out1\n") + bulk + len("\nout2\n"))
	if g.State != api.ExecDone || g.ExitCode == nil || *g.ExitCode != 7 || g.Signal != "" {
		t.Fatalf("exit after the restart: %+v", g)
	}
	if g.Stderr != "err1\nerr2\n" || g.StderrBytes != 10 || g.StdoutBytes != wantOut || g.StdoutOmitted == 0 ||
		!strings.HasPrefix(g.Stdout, "out1\naaa") || !strings.HasSuffix(g.Stdout, "aaa\nout2\n") {
		t.Fatalf("output after the restart: %+v", g)
	}
	stdout, last := f.readStream(a.ExecID, api.StreamStdout)
	if last.End != wantOut || last.Oldest == 0 || !last.Done || !strings.HasPrefix(stdout, "out1\naaaa") || !strings.HasSuffix(stdout, "aaaa\nout2\n") ||
		strings.Trim(stdout[5:len(stdout)-6], "a") != "" || int64(len(stdout)) != wantOut-(last.Oldest-1<<20) {
		t.Fatalf("stdout read back: %d bytes, last %+v", len(stdout), last)
	}
	if stderr, _ := f.readStream(a.ExecID, api.StreamStderr); stderr != "err1\nerr2\n" {
		t.Fatalf("stderr read back: %q", stderr)
	}

	// b: only its owner (or an admin) ends it.
	if err := f.callAs("intruder", api.RoleOperator, api.VerbExecKill, api.ExecTarget{ExecID: b.ExecID}, nil); code(err) != api.CodeForbidden {
		t.Fatalf("another principal's DELETE: %v", err)
	}
	if err := f.callAs("tester", api.RoleOperator, api.VerbExecKill, api.ExecTarget{ExecID: b.ExecID}, &g); err != nil {
		t.Fatal(err)
	}
	if g.State != api.ExecDone || g.ExitCode == nil || *g.ExitCode != 137 || g.Signal != "SIGKILL" || g.Stdout != "started\n" {
		t.Fatalf("DELETE after the restart: %+v", g)
	}

	// All three are still there after one more restart.
	f.restart(client(), 0, 0)
	for id, want := range map[string]int{a.ExecID: 7, b.ExecID: 137, c.ExecID: 3} {
		f.mustCall(api.VerbExecGet, api.ExecTarget{ExecID: id}, &g)
		if g.State != api.ExecDone || g.ExitCode == nil || *g.ExitCode != want {
			t.Fatalf("exec %s after a second restart: %+v", id, g)
		}
	}
	if g.ExecID != c.ExecID {
		f.mustCall(api.VerbExecGet, api.ExecTarget{ExecID: c.ExecID}, &g)
	}
	if g.Stdout != "done3\n" || g.Stderr != "e3\n" {
		t.Fatalf("the exec that ended before the restarts: %+v", g)
	}
}

// TestExecBackgroundConfinedAndRedacted performs two attacks on a background
// exec, which runs under a keeper outside the agent: reading the node's
// credentials (it is kept out of the data dir as a foreground exec is, the
// sandbox wrapper's fds passed through the keeper), and a secret the policy
// redacts, printed split across writes: no file of the exec on disk holds it.
func TestExecBackgroundConfinedAndRedacted(t *testing.T) {
	if sandbox.Probe().Landlock < 1 || os.Geteuid() != 0 {
		t.Skip("needs Landlock and root")
	}
	f, _ := guardFixture(t, `version: 1
rules:
  - name: default
    action: allow
redact:
  - {name: aws-key, pattern: 'AKIA[0-9A-Z]{16}'}
`, 3)
	creds := filepath.Join(f.data, "creds")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "node.creds"), []byte("SECRET-NKEY-SEED"), 0o600); err != nil {
		t.Fatal(err)
	}
	var r api.ExecResult
	// The secret's pieces come in the environment: the argv (in meta.json) holds none.
	f.mustCall(api.VerbExec, api.ExecRequest{Command: `printf %s "$P1"; sleep 0.05; printf '%s\n' "$P2"; printf '%s%s\n' "$P1" "$P2" >&2; cat ` +
		filepath.Join(creds, "node.creds"), Env: map[string]string{"P1": "AKIAABCD", "P2": "EFGHIJKLMNOP"}, Background: true, TimeoutMS: 1}, &r)
	f.mustCall(api.VerbExecWait, api.ExecTarget{ExecID: r.ExecID}, &r)
	if r.State != api.ExecDone || r.Stdout != "[REDACTED:aws-key]\n" || !strings.HasPrefix(r.Stderr, "[REDACTED:aws-key]\n") {
		t.Fatalf("background exec: %+v", r)
	}
	if r.ExitCode == nil || *r.ExitCode == 0 {
		t.Fatalf("the background exec read the data dir: %+v", r)
	}
	dir := filepath.Join(f.data, "execs", r.ExecID)
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) < 4 {
		t.Fatalf("exec dir: %v %v", ents, err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "EFGHIJKLMNOP") || strings.Contains(string(b), "SECRET-NKEY") {
			t.Errorf("%s holds a secret: %q", e.Name(), b)
		}
		if st, _ := e.Info(); st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", e.Name(), st.Mode())
		}
	}
}

// TestExecBackgroundLostAndExpired: a background exec whose keeper is killed
// (SIGKILL) ends as lost (exit code -1, signal "lost") and its program with it,
// never "running" for good; an ended one older than api.ExecKeep is forgotten
// by the next agent, its directory removed.
func TestExecBackgroundLostAndExpired(t *testing.T) {
	f := newFixture(t)
	t.Cleanup(func() { endKeepers(t, filepath.Join(f.data, "execs")) })
	var a, b api.ExecResult
	f.mustCall(api.VerbExec, api.ExecRequest{Command: "echo $$; exec sleep 300", Background: true, TimeoutMS: 1}, &a)
	f.mustCall(api.VerbExec, api.ExecRequest{Argv: []string{"true"}, Background: true}, &b)
	if b.State != api.ExecDone {
		t.Fatalf("true: %+v", b)
	}
	readMeta := func(id string) keeper.Meta {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(f.data, "execs", id, keeper.MetaName))
		var m keeper.Meta
		if err == nil {
			err = json.Unmarshal(raw, &m)
		}
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	var g api.ExecResult
	testutil.Eventually(t, 20*time.Second, func() bool {
		f.mustCall(api.VerbExecGet, api.ExecTarget{ExecID: a.ExecID}, &g)
		return g.Stdout != ""
	}, "the sleeper's pid")
	prog, _ := strconv.Atoi(strings.TrimSpace(g.Stdout))
	if err := syscall.Kill(readMeta(a.ExecID).Keeper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	f.mustCall(api.VerbExecWait, api.ExecTarget{ExecID: a.ExecID}, &g)
	if g.State != api.ExecDone || g.ExitCode == nil || *g.ExitCode != -1 || g.Signal != api.ExecLost {
		t.Fatalf("a lost keeper's exec: %+v", g)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return syscall.Kill(prog, 0) != nil || zombie(prog) }, "the program to end with its keeper")

	// b ended 25 hours ago, as far as its files say.
	m := readMeta(b.ExecID)
	m.StartedAt = time.Now().Add(-25 * time.Hour)
	raw, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(f.data, "execs", b.ExecID, keeper.MetaName), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	f.restart(nil, 0, 0)
	if err := f.call(api.VerbExecGet, api.ExecTarget{ExecID: b.ExecID}, &g); code(err) != api.CodeNotFound {
		t.Fatalf("an exec past ExecKeep after a restart: %v %+v", err, g)
	}
	if _, err := os.Stat(filepath.Join(f.data, "execs", b.ExecID)); !os.IsNotExist(err) {
		t.Fatalf("its directory: %v", err)
	}
	f.mustCall(api.VerbExecGet, api.ExecTarget{ExecID: a.ExecID}, &g)
	if g.Signal != api.ExecLost {
		t.Fatalf("the lost exec after a restart: %+v", g)
	}
}

// zombie reports whether pid has ended and waits for its parent.
func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	i := strings.LastIndexByte(string(b), ')')
	return err == nil && i > 0 && strings.HasPrefix(strings.TrimSpace(string(b)[i+1:]), "Z")
}
