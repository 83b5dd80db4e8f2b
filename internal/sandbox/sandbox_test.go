package sandbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/sandbox"
)

// need skips unless this machine can enforce everything the tests use.
func need(t *testing.T) {
	t.Helper()
	caps := sandbox.Probe()
	if caps.Landlock < 4 || !caps.NetNS || caps.Cgroups == 0 {
		t.Skipf("needs root, Landlock ABI >= 4 and cgroups: %+v", caps)
	}
}

// run runs script with /bin/sh under spec (through this test binary as the
// wrapper) and returns its combined output and exit code.
func run(t *testing.T, spec sandbox.Spec, shell, script string) (string, int) {
	t.Helper()
	if spec.Cgroup == "" {
		spec.Cgroup = "t" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	w, err := sandbox.Wrap("", spec, []string{shell, "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.ExtraFiles = append([]*os.File{nil, nil}, w.Child...) // the child's fds 5, 6
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		w.CloseChild()
		t.Fatal(err)
	}
	if err := w.Wait(5 * time.Second); err != nil {
		t.Errorf("wrapper: %v", err)
	}
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(interface{ Signaled() bool }); ok && ws.Signaled() {
			code = 128 + 9
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// workonly is the profile of the issue: write only dir, network none, 64 pids,
// 256 MiB.
func workonly(dir string) *api.SandboxProfile {
	return &api.SandboxProfile{Name: "workonly",
		Files:   api.SandboxFiles{Write: []string{dir}},
		Network: api.SandboxNetwork{Mode: api.NetworkNone},
		Limits:  api.SandboxLimits{MemoryBytes: 256 << 20, Pids: 64},
	}
}

func workdir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "fm-sandbox-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestFilesWriteOnlyWorkdir(t *testing.T) {
	need(t)
	dir := workdir(t)
	etc := workdir(t) // stands for /etc: a directory outside the profile's write list
	out, code := run(t, sandbox.Spec{Profile: workonly(dir)}, "/bin/sh",
		"touch "+etc+"/x; echo etc=$?; touch "+dir+"/x; echo work=$?; cat /etc/hostname >/dev/null; echo read=$?; touch /etc/fm-sandbox-x; echo etc2=$?")
	if code != 0 || !strings.Contains(out, "Permission denied") || !strings.Contains(out, "etc=1") ||
		!strings.Contains(out, "work=0") || !strings.Contains(out, "read=0") || !strings.Contains(out, "etc2=1") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(etc, "x")); err == nil {
		t.Fatal("the write outside the profile happened")
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err != nil {
		t.Fatalf("the write inside the profile did not happen: %v", err)
	}
}

func listen(t *testing.T) (net.Listener, string) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func TestNetworkNone(t *testing.T) {
	need(t)
	_, port := listen(t)
	probe := "exec 3<>/dev/tcp/127.0.0.1/" + port + " && echo connected || echo refused"
	if out, _ := run(t, sandbox.Spec{}, "/bin/bash", probe); !strings.Contains(out, "connected") {
		t.Fatalf("without a profile the listener is not reachable: %s", out)
	}
	out, _ := run(t, sandbox.Spec{Profile: workonly(workdir(t))}, "/bin/bash", probe)
	if !strings.Contains(out, "refused") || strings.Contains(out, "connected") {
		t.Fatalf("network none reached the loopback listener: %s", out)
	}
}

func TestConnectOnlyPort(t *testing.T) {
	need(t)
	_, p := listen(t)
	_, q := listen(t)
	pn, _ := strconv.Atoi(p)
	prof := &api.SandboxProfile{Name: "onlyp", Network: api.SandboxNetwork{Mode: api.NetworkTCP, Ports: []int{pn}}}
	out, _ := run(t, sandbox.Spec{Profile: prof}, "/bin/bash",
		"exec 3<>/dev/tcp/127.0.0.1/"+p+" && echo P=ok || echo P=no; exec 4<>/dev/tcp/127.0.0.1/"+q+" && echo Q=ok || echo Q=no")
	if !strings.Contains(out, "P=ok") || !strings.Contains(out, "Q=no") {
		t.Fatalf("connect only to %s: %s", p, out)
	}
}

func TestForkBombStopsAtPids(t *testing.T) {
	need(t)
	start := time.Now()
	out, _ := run(t, sandbox.Spec{Profile: workonly(workdir(t))}, "/bin/sh",
		`n=0; while [ $n -lt 200 ]; do sleep 1 & n=$((n+1)); done; wait; echo done`)
	if !strings.Contains(out, "fork") && !strings.Contains(strings.ToLower(out), "resource temporarily unavailable") {
		t.Fatalf("200 children under a 64 pids limit all started:\n%.2000s", out)
	}
	t.Logf("bomb stopped in %v", time.Since(start))
	// The machine still forks outside the group.
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryHogKilledInItsGroup(t *testing.T) {
	need(t)
	prof := workonly(workdir(t))
	prof.Limits.MemoryBytes = 32 << 20
	// tail keeps a line without a newline whole: it grows until the limit.
	spec := sandbox.Spec{Profile: prof, Cgroup: "t" + strconv.Itoa(os.Getpid()) + "-hog-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	out, code := run(t, spec, "/bin/sh", "head -c 200000000 /dev/zero | tail -n 1 >/dev/null; echo tail=$?")
	// The kernel kills tail; while tail's memory is still being freed, a
	// second charge may kill another process of the group (the shell, which
	// then prints nothing). Either way the group's OOM killer ended it.
	killed := strings.Contains(out, "tail=137") || (code == 137 && !strings.Contains(out, "tail="))
	if !killed {
		t.Fatalf("exit %d; the hog was not killed:\n%s", code, out)
	}
	if n := sandbox.OOMKills(spec.Cgroup); n < 1 {
		t.Fatalf("exit %d, %q, but the group's OOM killer killed %d processes", code, out, n)
	}
}

func TestEscapesFail(t *testing.T) {
	need(t)
	dir := workdir(t)
	// A set-user-ID root copy of id: with no_new_privs it runs as the caller.
	id, err := exec.LookPath("id")
	if err != nil {
		t.Skip(err)
	}
	b, err := os.ReadFile(id)
	if err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(dir, "suid-id")
	if err := os.WriteFile(suid, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, 0o4755); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Profile: workonly(dir), Cred: true, UID: 65534, GID: 65534}
	out, _ := run(t, spec, "/bin/sh", suid+" -u; unshare -U true && echo userns=ok || echo userns=no; unshare -Ur true && echo userns2=ok || echo userns2=no; ls /proc/1/root/ >/dev/null && echo root=ok || echo root=no")
	lines := strings.Fields(out)
	if len(lines) == 0 || lines[0] != "65534" {
		t.Errorf("the set-user-ID binary ran as root: %s", out)
	}
	for _, w := range []string{"userns=no", "userns2=no", "root=no"} {
		if !strings.Contains(out, w) {
			t.Errorf("want %s:\n%s", w, out)
		}
	}
	// root in a profile keeps no capability: /proc/1/root stays shut.
	out, _ = run(t, sandbox.Spec{Profile: workonly(dir)}, "/bin/sh", "ls /proc/1/root/ >/dev/null && echo root=ok || echo root=no; grep CapEff /proc/self/status")
	if !strings.Contains(out, "root=no") || !strings.Contains(out, "0000000000000000") {
		t.Errorf("root in a profile:\n%s", out)
	}
}

func TestHideWithoutProfile(t *testing.T) {
	if sandbox.Probe().Landlock < 1 {
		t.Skip("no Landlock")
	}
	data := workdir(t)
	if err := os.WriteFile(filepath.Join(data, "creds"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := workdir(t)
	out, _ := run(t, sandbox.Spec{Hide: []string{data}}, "/bin/sh",
		"cat "+data+"/creds && echo creds=ok || echo creds=no; touch "+other+"/y && echo other=ok || echo other=no")
	if !strings.Contains(out, "creds=no") || strings.Contains(out, "secret") || !strings.Contains(out, "other=ok") {
		t.Fatalf("%s", out)
	}
}

func TestCheckFailsClosed(t *testing.T) {
	p := &api.SandboxProfile{Name: "p", Network: api.SandboxNetwork{Mode: api.NetworkTCP, Ports: []int{443}}}
	if err := sandbox.Check(p, api.SandboxCaps{Landlock: 3, NetNS: true, Cgroups: 1}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("TCP ports on ABI 3: %v", err)
	}
	p.Network = api.SandboxNetwork{Mode: api.NetworkNone}
	if err := sandbox.Check(p, api.SandboxCaps{Landlock: 7}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("network none without namespaces: %v", err)
	}
	p.Limits.Pids = 5
	if err := sandbox.Check(p, api.SandboxCaps{Landlock: 7, NetNS: true}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("limits without cgroups: %v", err)
	}
	if err := sandbox.Check(p, api.SandboxCaps{Landlock: 7, NetNS: true, Cgroups: 1}); err != nil {
		t.Fatal(err)
	}
}

// attackEnv makes this test binary, run from inside a sandbox, the attacker:
// "ptrace:PID" attaches to PID with ptrace(2) and prints ptrace=ok or
// ptrace=no.
const attackEnv = "FM_SANDBOX_TEST_ATTACK"

func init() {
	a := os.Getenv(attackEnv)
	if a == "" {
		return
	}
	if pid, ok := strings.CutPrefix(a, "ptrace:"); ok {
		runtime.LockOSThread()
		n, _ := strconv.Atoi(pid)
		if err := unix.PtraceAttach(n); err != nil {
			fmt.Printf("ptrace=no (%v)\n", err)
			os.Exit(0)
		}
		fmt.Println("ptrace=ok")
		os.Exit(0)
	}
	if dirs, ok := strings.CutPrefix(a, "unprivileged:"); ok {
		// A node without root: hide data (keeping keep) from a shell running
		// script, as the node would, and print what the shell printed.
		d := strings.SplitN(dirs, ":", 3)
		os.Exit(unprivileged(d[0], d[1], d[2]))
	}
	fmt.Println("unknown attack", a)
	os.Exit(2)
}

func unprivileged(data, keep, script string) int {
	fmt.Printf("canhide=%v\n", sandbox.CanHide())
	self, _ := os.Executable()
	w, err := sandbox.Wrap(self, sandbox.Spec{Hide: []string{data}, Write: []string{keep}}, []string{"/bin/sh", "-c", script})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	cmd.ExtraFiles = append([]*os.File{nil, nil}, w.Child...)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	sandbox.Unprivileged(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		w.CloseChild()
		fmt.Println("start:", err)
		return 1
	}
	if err := w.Wait(5 * time.Second); err != nil {
		fmt.Println("wrapper:", err)
	}
	_ = cmd.Wait()
	return 0
}

// TestPtraceOutsideFails performs the attack of a session tracing a process
// outside its sandbox (of the same user, which ptrace alone would allow): it
// works from an unconfined program and fails from a profile's session and
// from a session with only a hidden path.
func TestPtraceOutsideFails(t *testing.T) {
	need(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	attack := func(spec sandbox.Spec) string {
		target := exec.Command("sleep", "60")
		if err := target.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { target.Process.Kill(); target.Wait() }()
		out, _ := run(t, spec, "/bin/sh", attackEnv+"=ptrace:"+strconv.Itoa(target.Process.Pid)+" "+self)
		return out
	}
	if out := attack(sandbox.Spec{}); !strings.Contains(out, "ptrace=ok") {
		t.Fatalf("unconfined, the attack does not work: %s", out)
	}
	if out := attack(sandbox.Spec{Profile: workonly(workdir(t))}); !strings.Contains(out, "ptrace=no") {
		t.Errorf("a profile's session traced a process outside: %s", out)
	}
	if out := attack(sandbox.Spec{Hide: []string{workdir(t)}}); !strings.Contains(out, "ptrace=no") {
		t.Errorf("a session with the data dir hidden traced a process outside: %s", out)
	}
}

// TestHideByMountKeepsTheRest: hiding a directory of a busy one (a data dir in
// /tmp) leaves the busy one as it was: files made there after the session
// started, by the session or by others, are usable; a kept path below the
// hidden one stays writable; unmounting the mask and going round it through
// /proc/PID/root of a process outside fail. The Landlock allow-list made the
// parent unwritable.
func TestHideByMountKeepsTheRest(t *testing.T) {
	need(t)
	parent := workdir(t)
	data := filepath.Join(parent, "data")
	keep := filepath.Join(data, "sessions", "s1")
	if err := os.MkdirAll(keep, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "creds"), []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := filepath.Join(parent, "later")
	script := strings.Join([]string{
		"cat " + data + "/creds && echo creds=ok || echo creds=no",
		"echo ls=$(ls " + data + ")",
		"echo k > " + keep + "/f && cat " + keep + "/f >/dev/null && echo keep=ok || echo keep=no",
		"echo n > " + parent + "/new && cat " + parent + "/new >/dev/null && echo new=ok || echo new=no",
		"while [ ! -e " + later + " ]; do sleep 0.05; done; cat " + later,
		"umount " + data + " 2>/dev/null && echo umount=ok || echo umount=no",
		"umount -l " + data + " 2>/dev/null && echo umount=ok || echo umount=no",
		"cat /proc/" + strconv.Itoa(os.Getpid()) + "/root" + data + "/creds && echo proc=ok || echo proc=no",
		"cat /proc/1/root" + data + "/creds && echo proc1=ok || echo proc1=no",
		"unshare -m sh -c 'umount " + data + " && cat " + data + "/creds' 2>/dev/null && echo unshare=ok || echo unshare=no",
		"nsenter -t 1 -m cat " + data + "/creds 2>/dev/null && echo nsenter=ok || echo nsenter=no",
		"mkdir -p " + parent + "/mnt && mount --bind / " + parent + "/mnt 2>/dev/null && echo bind=ok || echo bind=no",
	}, "; ")
	go func() {
		time.Sleep(200 * time.Millisecond) // made after the session started (the loop waits for it)
		os.WriteFile(later, []byte("later=ok\n"), 0o644)
	}()
	out, _ := run(t, sandbox.Spec{Hide: []string{data}, Write: []string{keep}}, "/bin/sh", script)
	for _, w := range []string{"creds=no", "ls=sessions\n", "keep=ok", "new=ok", "later=ok", "umount=no", "proc=no", "proc1=no", "unshare=no", "nsenter=no", "bind=no"} {
		if !strings.Contains(out, w) {
			t.Errorf("want %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "SECRET") || strings.Contains(out, "umount=ok") {
		t.Errorf("the hidden file was read or the mask lifted:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(keep, "f")); err != nil || string(b) != "k\n" {
		t.Errorf("the kept path's file: %q %v", b, err)
	}
	// A session as another user (--user) gets the same mask.
	out, _ = run(t, sandbox.Spec{Hide: []string{data}, Cred: true, UID: 65534, GID: 65534}, "/bin/sh",
		"id -u; ls -A "+data+"; cat /proc/1/root"+data+"/creds && echo proc1=ok || echo proc1=no")
	if !strings.HasPrefix(out, "65534\n") || strings.Contains(out, "creds\n") || strings.Contains(out, "SECRET") || !strings.Contains(out, "proc1=no") {
		t.Errorf("as another user:\n%s", out)
	}
}

// TestBareName: a program named without a path is looked up in its PATH, as
// exec(3p) does; the wrapper ran only paths and an exec of "sh" failed.
func TestBareName(t *testing.T) {
	if sandbox.Probe().Landlock < 1 {
		t.Skip("no Landlock")
	}
	out, code := run(t, sandbox.Spec{Hide: []string{workdir(t)}}, "sh", "echo bare=ok")
	if code != 0 || !strings.Contains(out, "bare=ok") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

// TestHideWithoutRoot: a node that does not run as root hides its data dir the
// same way, from a user namespace of the wrapper's own (sandbox.Unprivileged):
// a same-user session cannot read it, keeps its own path below it and uses the
// directory around it, and has no capability left. Without the namespace the
// wrapper could not mount and nothing was hidden.
func TestHideWithoutRoot(t *testing.T) {
	need(t)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pub := workdir(t) // 0777: the other user's
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(pub, "sandbox.test")
	if err := os.WriteFile(self, b, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(pub, "data")
	keep := filepath.Join(data, "run", "s1")
	if err := os.MkdirAll(keep, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "creds"), []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{data, filepath.Join(data, "run"), keep, filepath.Join(data, "creds")} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	script := strings.Join([]string{
		"id -u",
		"cat " + data + "/creds && echo creds=ok || echo creds=no",
		"echo k > " + keep + "/f && echo keep=ok || echo keep=no",
		"echo n > " + pub + "/new && cat " + pub + "/new >/dev/null && echo new=ok || echo new=no",
		"umount " + data + " 2>/dev/null && echo umount=ok || echo umount=no",
		"grep CapEff /proc/self/status",
	}, "; ")
	cmd := exec.Command(self)
	cmd.Env = []string{attackEnv + "=unprivileged:" + data + ":" + keep + ":" + script}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, w := range []string{"canhide=true", "65534\n", "creds=no", "keep=ok", "new=ok", "umount=no", "0000000000000000"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("want %q:\n%s", w, out)
		}
	}
	if strings.Contains(string(out), "SECRET") {
		t.Errorf("the creds were read:\n%s", out)
	}
	t.Logf("as uid 65534:\n%s", out)
}
