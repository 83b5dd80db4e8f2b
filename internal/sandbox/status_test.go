package sandbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/sandbox"
)

// runStatus runs script with /bin/sh under spec through a wrapper with a status
// pipe (Wrapped.Status), calling during(pid of the wrapper) once the program
// made the file started in dir and then letting it go on (the fifo go in dir
// reaches its end). It returns the output, the report and the wrapper's wait
// status.
func runStatus(t *testing.T, spec sandbox.Spec, dir, script string, during func(pid int)) (string, string, syscall.WaitStatus) {
	t.Helper()
	if spec.Cgroup == "" {
		spec.Cgroup = "t" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	fifo := filepath.Join(dir, "go")
	if during != nil {
		if err := syscall.Mkfifo(fifo, 0o666); err != nil {
			t.Fatal(err)
		}
		script = ": > " + dir + "/started; read x < " + fifo + "; " + script
	}
	w, err := sandbox.Wrap("", spec, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	status, err := w.Status()
	if err != nil {
		t.Fatal(err)
	}
	defer status.Close()
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.ExtraFiles = append([]*os.File{nil, nil}, w.Child...)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		w.CloseChild()
		t.Fatal(err)
	}
	if err := w.Wait(5 * time.Second); err != nil {
		t.Errorf("wrapper: %v", err)
	}
	if during != nil {
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the program did not start: %s", out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		during(cmd.Process.Pid)
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	rep, err := io.ReadAll(io.LimitReader(status, 64))
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return out.String(), string(rep), cmd.ProcessState.Sys().(syscall.WaitStatus)
}

// TestStatusReportsTheProgramsEnd: with a status pipe the program is the
// wrapper's child, the report says how it ended, and the wrapper ends the same
// way (its parent without the pipe sees the same wait status).
func TestStatusReportsTheProgramsEnd(t *testing.T) {
	if sandbox.Probe().Landlock < 1 {
		t.Skip("no Landlock")
	}
	spec := sandbox.Spec{Hide: []string{workdir(t)}}
	dir := workdir(t)
	out, rep, ws := runStatus(t, spec, dir, "echo ppid=$PPID; exit 3", func(pid int) {})
	if rep != "x3\n" || !ws.Exited() || ws.ExitStatus() != 3 {
		t.Errorf("exit 3: report %q, wait status %v: %s", rep, ws, out)
	}
	if !strings.Contains(out, "ppid=") || strings.Contains(out, "ppid="+strconv.Itoa(os.Getpid())) {
		t.Errorf("the program is not the wrapper's child: %s", out)
	}
	out, rep, ws = runStatus(t, spec, workdir(t), "kill -TERM $$", nil)
	if rep != "s15\n" || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("SIGTERM: report %q, wait status %v: %s", rep, ws, out)
	}
	_, rep, ws = runStatus(t, spec, workdir(t), "exit 0", nil)
	if rep != "x0\n" || ws.ExitStatus() != 0 {
		t.Errorf("exit 0: report %q, wait status %v", rep, ws)
	}
}

// TestStatusWrapperLeavesTheGroup: with a status pipe the wrapper stays as
// the program's parent, but not in the program's cgroup. Before, it stayed:
// its threads counted against the program's pids limit, and the group's OOM
// killer could pick it over the program.
func TestStatusWrapperLeavesTheGroup(t *testing.T) {
	need(t)
	for _, nobody := range []bool{false, true} { // the wrapper leaves after it changed user too
		dir := workdir(t)
		spec := sandbox.Spec{Profile: workonly(dir), Cgroup: "t" + strconv.Itoa(os.Getpid()) + "-leave-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
		if nobody {
			spec.Cred, spec.UID, spec.GID = true, 65534, 65534
		}
		var check []string
		for _, c := range []string{"pids", "memory"} {
			procs := sandbox.GroupProcs(c, spec.Cgroup)
			check = append(check, "grep -qx $$ "+procs+" && echo "+c+"=self; grep -qx $PPID "+procs+" && echo "+c+"=wrapper")
		}
		out, rep, _ := runStatus(t, spec, dir, strings.Join(check, "; ")+"; echo uid=$(id -u); exit 0", func(int) {})
		if rep != "x0\n" {
			t.Fatalf("report %q: %s", rep, out)
		}
		if nobody != strings.Contains(out, "uid=65534") {
			t.Fatalf("nobody %v: %s", nobody, out)
		}
		// The attack of a program leaving its group (and its limits) from the
		// start, while the wrapper may still hold the files it leaves by:
		// through the wrapper's fds, and through the hierarchies' own files.
		aspec := spec
		aspec.Cgroup += "-x"
		attack := "for i in 1 2 3 4 5 6 7 8 9 10; do for f in /proc/$PPID/fd/*; do echo 0 > $f; done; done 2>/dev/null; " +
			"for c in pids memory; do echo 0 > /sys/fs/cgroup/$c/cgroup.procs; echo 0 > /sys/fs/cgroup/cgroup.procs; done 2>/dev/null; "
		for _, c := range []string{"pids", "memory"} {
			attack += "grep -qx $$ " + sandbox.GroupProcs(c, aspec.Cgroup) + " && echo " + c + "=kept; "
		}
		aout, _, _ := runStatus(t, aspec, workdir(t), attack+"exit 0", nil)
		for _, c := range []string{"pids", "memory"} {
			if !strings.Contains(aout, c+"=kept") {
				t.Errorf("nobody %v: the program left its %s group: %s", nobody, c, aout)
			}
			if !strings.Contains(out, c+"=self") {
				t.Errorf("the program is not in its %s group: %s", c, out)
			}
			if strings.Contains(out, c+"=wrapper") {
				t.Errorf("nobody %v: the wrapper stayed in the program's %s group: %s", nobody, c, out)
			}
		}
	}
}

// TestStatusWrapperHoldsNothing performs the attacks on the wrapper that stays
// behind: from the program, tracing each of its threads and reading the data
// dir and its fds through /proc/PPID; from outside, its fds and capabilities.
// A profile's program (no capability) and another user's reach none of it; a
// root program without a profile does not reach the data dir through it.
func TestStatusWrapperHoldsNothing(t *testing.T) {
	need(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data := workdir(t)
	if err := os.WriteFile(filepath.Join(data, "creds"), []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A root program without a profile may trace the wrapper's thread in its
	// domain (root's powers, docs/sandbox.md): it would stop it, so it tries
	// only the threads outside.
	attack := func(strict bool) string {
		trace := attackEnv + "=ptrace:${d##*/} " + self
		if !strict {
			trace = "[ ${d##*/} = $PPID ] || " + trace
		}
		return strings.Join([]string{
			"for d in /proc/$PPID/task/*; do cat $d/root" + data + "/creds; cat $d/cwd/creds; " + trace + "; done",
			"for f in /proc/$PPID/fd/*; do readlink $f && echo fd=ok; done; echo fd=done",
		}, "; ")
	}
	// held is what the wrapper at pid still holds that the program does not
	// have: fds it was given, capabilities.
	held := func(t *testing.T, pid int) []string {
		var found []string
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			fd, _ := strconv.Atoi(e.Name())
			l, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + e.Name())
			info, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/fdinfo/" + e.Name())
			if errors.Is(err, fs.ErrNotExist) { // closed since: not held
				continue
			}
			if fd == sandbox.FD+3 || cloexec(string(info)) { // the status pipe, what the wrapper opened itself
				continue
			}
			found = append(found, fmt.Sprintf("fd %d: %s", fd, l))
		}
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(st), "CapEff:\t0000000000000000") || !strings.Contains(string(st), "CapPrm:\t0000000000000000") {
			found = append(found, "capabilities:\n"+string(st))
		}
		return found
	}
	// The wrapper gives them up right after it started the program, which may
	// run first: this waits (the program's attack waits for it too).
	outside := func(t *testing.T, pid int) {
		found := held(t, pid)
		for deadline := time.Now().Add(5 * time.Second); len(found) > 0 && time.Now().Before(deadline); found = held(t, pid) {
			time.Sleep(2 * time.Millisecond) // polling /proc: there is nothing to wait on
		}
		for _, f := range found {
			t.Errorf("the wrapper holds %s", f)
		}
	}
	for _, c := range []struct {
		name   string
		spec   sandbox.Spec
		strict bool // the program has no capability: nothing of the wrapper's is reachable
	}{
		{"profile", sandbox.Spec{Hide: []string{data}, Profile: workonly(os.TempDir())}, true},
		{"user", sandbox.Spec{Hide: []string{data}, Cred: true, UID: 65534, GID: 65534}, true},
		{"root", sandbox.Spec{Hide: []string{data}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := workdir(t)
			if c.spec.Profile != nil {
				c.spec.Profile = workonly(dir)
			}
			out, rep, _ := runStatus(t, c.spec, dir, attack(c.strict)+"; exit 0", func(pid int) { outside(t, pid) })
			if rep != "x0\n" {
				t.Errorf("report %q: %s", rep, out)
			}
			if strings.Contains(out, "SECRET") {
				t.Errorf("the data dir was read through the wrapper:\n%s", out)
			}
			if c.strict && (strings.Contains(out, "ptrace=ok") || strings.Contains(out, "fd=ok")) {
				t.Errorf("the program reached its wrapper:\n%s", out)
			}
			if !strings.Contains(out, "fd=done") || c.name == "profile" && !strings.Contains(out, "ptrace=no") {
				t.Errorf("the attack did not run:\n%s", out)
			}
			t.Logf("%s", out)
		})
	}
}

// cloexec reports whether an fdinfo's flags have O_CLOEXEC: a file the process
// opened itself (Go opens every file so), not one it was given.
func cloexec(info string) bool {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			f, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && f&syscall.O_CLOEXEC != 0
		}
	}
	return false
}
