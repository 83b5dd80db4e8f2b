package node_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestExecPreparedNamespace performs the attack of an exec reading and listing
// the node's data dir through the mount namespace a root node prepares for its
// execs: the spare wrapper and cold ones (an exec with stdin, a background exec
// under its keeper) join the one namespace, not the node's, and see the data
// dir empty. After the node's mount table changes, the next exec makes its own
// namespace as before (the prepared one no longer shows the node's mounts) and
// is kept out the same.
func TestExecPreparedNamespace(t *testing.T) {
	if sandbox.Probe().Landlock < 1 || os.Geteuid() != 0 {
		t.Skip("needs Landlock and root")
	}
	f := newFixture(t)
	creds := filepath.Join(f.data, "creds")
	if err := os.MkdirAll(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "node.creds"), []byte("SECRET-NKEY-SEED"), 0o600); err != nil {
		t.Fatal(err)
	}
	own, _ := os.Readlink("/proc/self/ns/mnt")
	attack := "readlink /proc/self/ns/mnt; cat " + filepath.Join(creds, "node.creds") + "; echo ls=$(ls -A " + f.data + ")"
	exec := func(stdin *string) string {
		t.Helper()
		var r api.ExecResult
		f.mustCall(api.VerbExec, api.ExecRequest{Command: attack, Stdin: stdin}, &r)
		if strings.Contains(r.Stdout, "SECRET") || !strings.Contains(r.Stdout, "ls=\n") || r.Stderr == "" {
			t.Fatalf("the exec read the data dir: %+v", r)
		}
		ns := strings.SplitN(r.Stdout, "\n", 2)[0]
		if !strings.HasPrefix(ns, "mnt:[") || ns == own {
			t.Fatalf("the exec ran in the node's namespace %s: %+v", own, r)
		}
		return ns
	}
	exec(nil) // no namespace prepared yet: its own
	// The spare holds the prepared namespace as its fd 7; held here too, it
	// stays alive (a namespace's number is reused once it ends).
	held := preparedSpare(t)
	prepared, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(held.Fd())))
	if got := exec(nil); got != prepared { // the spare's
		t.Fatalf("the spare's exec ran in %s, the prepared namespace is %s", got, prepared)
	}
	empty := ""
	if got := exec(&empty); got != prepared { // a cold wrapper's
		t.Fatalf("a cold wrapper's exec ran in %s, the prepared namespace is %s", got, prepared)
	}
	preparedSpare(t).Close()
	if got := exec(nil); got != prepared {
		t.Fatalf("the second spare's exec ran in %s, the prepared namespace is %s", got, prepared)
	}
	// A background exec (under its keeper, cold) joins it too.
	var bg, bw api.ExecResult
	f.mustCall(api.VerbExec, api.ExecRequest{Command: attack, Background: true, TimeoutMS: 1}, &bg)
	f.mustCall(api.VerbExecWait, api.ExecTarget{ExecID: bg.ExecID}, &bw)
	if ns := strings.SplitN(bw.Stdout, "\n", 2)[0]; ns != prepared || strings.Contains(bw.Stdout, "SECRET") || !strings.Contains(bw.Stdout, "ls=\n") {
		t.Fatalf("a background exec (prepared namespace %s): %+v", prepared, bw)
	}

	// A mount on the node: the prepared namespace does not show it.
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(mnt, "seen"), []byte("mounted"), 0o644); err != nil {
		t.Fatal(err)
	}
	var r api.ExecResult
	f.mustCall(api.VerbExec, api.ExecRequest{Command: attack + "; cat " + filepath.Join(mnt, "seen")}, &r)
	if ns := strings.SplitN(r.Stdout, "\n", 2)[0]; ns == prepared || ns == own || !strings.Contains(r.Stdout, "mounted") ||
		strings.Contains(r.Stdout, "SECRET") || !strings.Contains(r.Stdout, "ls=\n") {
		t.Fatalf("after a mount on the node (prepared namespace %s): %+v", prepared, r)
	}
}

// preparedSpare waits for the node's spare wrapper holding a prepared mount
// namespace (its fd 7) and opens that namespace.
func preparedSpare(t *testing.T) *os.File {
	t.Helper()
	var f *os.File
	testutil.Eventually(t, 20*time.Second, func() bool {
		for _, pid := range spareWrappers(t) {
			fd7 := filepath.Join("/proc", strconv.Itoa(pid), "fd", strconv.Itoa(sandbox.FD+2))
			if l, err := os.Readlink(fd7); err == nil && strings.HasPrefix(l, "mnt:[") {
				if f, err = os.Open(fd7); err == nil {
					return true
				}
			}
		}
		return false
	}, "a spare wrapper holding a prepared namespace")
	t.Cleanup(func() { f.Close() })
	return f
}
