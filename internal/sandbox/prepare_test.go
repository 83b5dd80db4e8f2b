package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/sandbox"
)

// runIn runs script with /bin/sh under spec through WrapIn(ns) and returns its
// output (the wrapper's report is checked).
func runIn(t *testing.T, ns *sandbox.Namespace, spec sandbox.Spec, script string) string {
	t.Helper()
	w, err := sandbox.WrapIn("", ns, spec, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	return runWrapped(t, w)
}

// runJoining is runIn with the wrapper told to join ns whatever Fits says (a
// mount anywhere on this machine makes ns stale for Fits; the wrapper's own
// check does not depend on that).
func runJoining(t *testing.T, ns *sandbox.Namespace, spec sandbox.Spec, script string) string {
	t.Helper()
	w, err := sandbox.WrapJoining(ns, spec, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	return runWrapped(t, w)
}

func runWrapped(t *testing.T, w *sandbox.Wrapped) string {
	t.Helper()
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.ExtraFiles = append([]*os.File{nil, nil}, w.Child...) // the child's fds 5, 6 (and 7)
	cmd.WaitDelay = 5 * time.Second
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		w.CloseChild()
		t.Fatal(err)
	}
	if err := w.Wait(5 * time.Second); err != nil {
		t.Errorf("wrapper: %v", err)
	}
	_ = cmd.Wait()
	return out.String()
}

// nsOf is the mount namespace a program printed with `readlink /proc/self/ns/mnt`.
func nsOf(out string) string {
	for _, l := range strings.Fields(out) {
		if strings.HasPrefix(l, "mnt:[") {
			return l
		}
	}
	return ""
}

// prepareData is a data dir with a secret and a prepared namespace hiding it
// (and a file hidden next to it).
func prepareData(t *testing.T) (data, file string, ns *sandbox.Namespace) {
	t.Helper()
	if sandbox.Probe().Landlock < 1 || os.Geteuid() != 0 {
		t.Skip("needs Landlock and root")
	}
	parent := workdir(t)
	data = filepath.Join(parent, "data")
	if err := os.MkdirAll(filepath.Join(data, "creds"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "creds", "node.creds"), []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(parent, "nats.creds")
	if err := os.WriteFile(file, []byte("FILESECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	ns, err := sandbox.Prepare("", []string{data, file})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return data, file, ns
}

// TestPreparedNamespaceHides performs the attacks of a program that joined the
// prepared namespace: reading and listing the hidden data dir and file,
// unmounting the mask, going round it through the node's namespace
// (/proc/1/root, nsenter) and the namespace file the wrapper was given. Two
// programs share the one namespace, which is not the node's.
func TestPreparedNamespaceHides(t *testing.T) {
	data, file, ns := prepareData(t)
	own, _ := os.Readlink("/proc/self/ns/mnt")
	script := strings.Join([]string{
		"readlink /proc/self/ns/mnt",
		"cat " + data + "/creds/node.creds && echo creds=ok || echo creds=no",
		"echo ls=$(ls -A " + data + ")",
		"cat " + file + " && echo file=ok || echo file=no",
		"umount " + data + " 2>/dev/null && echo umount=ok || echo umount=no",
		"umount -l " + data + " 2>/dev/null && echo umount=ok || echo umount=no",
		"cat /proc/1/root" + data + "/creds/node.creds && echo proc1=ok || echo proc1=no",
		"nsenter -t 1 -m cat " + data + "/creds/node.creds 2>/dev/null && echo nsenter=ok || echo nsenter=no",
		"[ -e /proc/self/fd/7 ] && echo fd7=open || echo fd7=closed",
		"touch " + data + "/x 2>/dev/null && echo write=ok || echo write=no",
	}, "; ")
	spec := sandbox.Spec{Hide: []string{data, file}}
	if !ns.Fits(spec) && !ns.Stale() {
		t.Fatal("the namespace does not fit the spec it was made for")
	}
	out := runJoining(t, ns, spec, script)
	t.Logf("joined:\n%s", out)
	for _, w := range []string{"creds=no", "ls=\n", "file=no", "umount=no", "proc1=no", "nsenter=no", "fd7=closed", "write=no"} {
		if !strings.Contains(out, w) {
			t.Errorf("want %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "SECRET") || strings.Contains(out, "umount=ok") {
		t.Errorf("the hidden files were read or the mask lifted:\n%s", out)
	}
	first := nsOf(out)
	if first == "" || first == own {
		t.Fatalf("the program ran in the node's namespace (%s):\n%s", own, out)
	}
	// The second program joins the same namespace: none is made per program.
	if again := nsOf(runIn(t, ns, spec, "readlink /proc/self/ns/mnt")); again != first && !ns.Stale() {
		t.Errorf("the second program ran in %s, the first in %s", again, first)
	}
	// A spare wrapper (LaterIn, Send) joins it too.
	w, err := sandbox.LaterIn("", ns)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.ExtraFiles = append([]*os.File{nil, nil}, w.Child...)
	var out2 strings.Builder
	cmd.Stdout, cmd.Stderr = &out2, &out2
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.CloseChild()
	spec.Argv = []string{"/bin/sh", "-c", "readlink /proc/self/ns/mnt; cat " + data + "/creds/node.creds || echo creds=no"}
	spec.Dir = "/"
	if err := w.Send(spec); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if (nsOf(out2.String()) != first && !ns.Stale()) || !strings.Contains(out2.String(), "creds=no") {
		t.Errorf("through a spare:\n%s", out2.String())
	}
}

// TestPreparedNamespaceFallback: a wrapper whose spec the prepared namespace
// does not fit makes its own as before: another set of hidden paths, a kept
// path below a hidden one, a hidden path made after the namespace, a working
// directory below the hidden one (refused). A wrapper told to join a namespace
// whose mask is gone (a hidden file replaced by rename, which takes the mount
// off it there) masks for itself and does not show the new file.
func TestPreparedNamespaceFallback(t *testing.T) {
	data, file, ns := prepareData(t)
	first := nsOf(runJoining(t, ns, sandbox.Spec{Hide: []string{data, file}}, "readlink /proc/self/ns/mnt"))
	if first == "" {
		t.Fatal("no namespace")
	}
	check := func(name string, spec sandbox.Spec, script string, want ...string) {
		t.Helper()
		if ns.Fits(spec) {
			t.Errorf("%s: the prepared namespace fits", name)
		}
		out := runIn(t, ns, spec, "readlink /proc/self/ns/mnt; "+script)
		if got := nsOf(out); got == "" || got == first {
			t.Errorf("%s: ran in %s (the prepared one is %s):\n%s", name, got, first, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: want %q:\n%s", name, w, out)
			}
		}
		if strings.Contains(out, "SECRET") {
			t.Errorf("%s: a hidden file was read:\n%s", name, out)
		}
	}
	check("another hide set", sandbox.Spec{Hide: []string{data}}, "cat "+data+"/creds/node.creds || echo creds=no", "creds=no")
	keep := filepath.Join(data, "sessions", "s1")
	if err := os.MkdirAll(keep, 0o700); err != nil {
		t.Fatal(err)
	}
	check("a kept path", sandbox.Spec{Hide: []string{data, file}, Write: []string{keep}},
		"echo k > "+keep+"/f && echo keep=ok; cat "+data+"/creds/node.creds || echo creds=no", "keep=ok", "creds=no")

	// A working directory below the hidden one is refused, joined or not.
	w, err := sandbox.WrapIn("", ns, sandbox.Spec{Hide: []string{data, file}}, []string{"/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.Dir = filepath.Join(data, "creds")
	cmd.ExtraFiles = append([]*os.File{nil, nil}, w.Child...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(5 * time.Second); err == nil || !strings.Contains(err.Error(), "working directory") {
		t.Errorf("a working directory in the hidden dir: %v", err)
	}
	_ = cmd.Wait()

	// The hidden file replaced on the node (write and rename, as editors and
	// credential tools do): the prepared namespace no longer covers it.
	tmp := file + ".new"
	if err := os.WriteFile(tmp, []byte("NEWSECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	check("a hidden file replaced", sandbox.Spec{Hide: []string{data, file}}, "cat "+file+" || echo file=no", "file=no")
	// A wrapper told to join it anyway (the node's check raced the rename)
	// checks the marks itself and masks.
	w, err = sandbox.WrapJoining(ns, sandbox.Spec{Hide: []string{data, file}}, []string{"/bin/sh", "-c", "readlink /proc/self/ns/mnt; cat " + file + " || echo file=no"})
	if err != nil {
		t.Fatal(err)
	}
	if out := runWrapped(t, w); nsOf(out) == first || !strings.Contains(out, "file=no") || strings.Contains(out, "SECRET") {
		t.Errorf("a wrapper joining a namespace whose mask is gone:\n%s", out)
	}
	// A hidden path made after the namespace was.
	later := filepath.Join(filepath.Dir(data), "later")
	ns2, err := sandbox.Prepare("", []string{data, later})
	if err != nil {
		t.Fatal(err)
	}
	defer ns2.Close()
	spec := sandbox.Spec{Hide: []string{data, later}}
	if !ns2.Fits(spec) && !ns2.Stale() {
		t.Fatal("a namespace hiding a path that is not there does not fit")
	}
	ns, first = ns2, nsOf(runJoining(t, ns2, spec, "readlink /proc/self/ns/mnt"))
	if err := os.MkdirAll(later, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(later, "k"), []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	check("a hidden path made later", spec, "cat "+later+"/k || echo later=no", "later=no")
	if !ns2.Stale() {
		t.Error("the namespace is not stale")
	}
}
