package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/holder"
)

// envTestMain makes the test binary act as fleetmux (TestMain calls main): dev and
// node launch their holder as `<this binary> holder --data DIR`, so the test binary
// must be one. TestMain sets it for the whole test process; the holders inherit it.
const envTestMain = "FLEETMUX_TEST_MAIN"

// endHolder, registered before the cleanup that stops a dev or node on data, ends
// the holder that serves data once the test is over: the sessions the stopped agent
// left in it (they survive the agent; that is the point) would keep it running.
func endHolder(t *testing.T, data string) {
	t.Helper()
	abs, err := filepath.Abs(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := holder.Dial(ctx, holderDir(abs))
		if err != nil {
			return // none runs (it exited idle, or never started)
		}
		_, pid := c.HolderVersion()
		c.Close()
		if err := terminate(pid); err != nil {
			t.Error(err)
		}
	})
}

// terminate sends SIGTERM to pid and waits until it is gone (a holder ends its
// sessions within holder's close grace).
func terminate(pid int) error {
	if pid <= 0 || pid == os.Getpid() {
		return fmt.Errorf("holder pid %d", pid)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("holder %d did not end on SIGTERM within 15s", pid)
		}
		time.Sleep(20 * time.Millisecond) // polling a pid: there is nothing to wait on
	}
	return nil
}

// holderProcs lists the processes running this test binary as `holder`.
func holderProcs() []int {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if len(argv) >= 2 && argv[0] == exe && argv[1] == "holder" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// checkHolders is TestMain's check that the tests left no holder behind: one that
// holds nothing exits by itself within holder.DefaultIdleExit, so it waits that long
// (and a bit) for them to go; it ends and reports those that remain.
func checkHolders() error {
	deadline := time.Now().Add(holder.DefaultIdleExit + 5*time.Second)
	for {
		pids := holderProcs()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var errs []error
			for _, pid := range pids {
				errs = append(errs, terminate(pid))
			}
			return errors.Join(append([]error{fmt.Errorf("%d holder processes outlived the tests: %v", len(pids), pids)}, errs...)...)
		}
		time.Sleep(100 * time.Millisecond) // polling /proc: there is nothing to wait on
	}
}

// TestHolderDefault: dev launches its holder by default (this binary, in holder
// mode), the session outlives dev, a second dev on the same data reattaches it, and
// --holder=false starts none.
func TestHolderDefault(t *testing.T) {
	list := func(t *testing.T) ([]holder.Info, int, error) {
		data, err := filepath.Abs("data") // startDev's --data, in its cwd
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := holder.Dial(ctx, holderDir(data))
		if err != nil {
			return nil, 0, err
		}
		defer c.Close()
		_, pid := c.HolderVersion()
		l, err := c.List(ctx)
		return l, pid, err
	}
	t.Run("on", func(t *testing.T) {
		addr := startDev(t)
		if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil || out != "here/s1\n" {
			t.Fatalf("new: %q %q %v", out, errs, err)
		}
		l, pid, err := list(t)
		if err != nil {
			t.Fatalf("dev started no holder: %v", err)
		}
		if len(l) != 1 || l[0].ID != "s1" {
			t.Fatalf("the holder holds %+v, want s1", l)
		}
		exe, _ := os.Executable()
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if pid == os.Getpid() || !strings.HasPrefix(string(b), exe+"\x00holder\x00") {
			t.Fatalf("holder pid %d runs %q, want %s holder", pid, b, exe)
		}
	})
	t.Run("off", func(t *testing.T) {
		addr := startDev(t, "--holder=false")
		if out, errs, err := runArgs(t, "new", "--addr", addr); err != nil || out != "here/s1\n" {
			t.Fatalf("new: %q %q %v", out, errs, err)
		}
		if _, pid, err := list(t); err == nil {
			t.Fatalf("dev --holder=false started a holder (pid %d)", pid)
		}
	})
}

// TestHolderChildHearsHUP: a session's program, started by a `fleetmux holder`,
// does not start with SIGHUP ignored (the holder's own immunity to its terminal's
// hangup must not pass to its sessions: closing one hangs up its jobs).
func TestHolderChildHearsHUP(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	endHolder(t, data)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := holder.Ensure(ctx, holderDir(data), []string{exe, "holder", "--data", data})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, master, err := c.Spawn(ctx, holder.Spawn{ID: "s1", Argv: []string{"/bin/sh", "-c", "grep SigIgn /proc/self/status"}, Dir: "/", Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	master.Close()
	st, err := c.Attach(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Master.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	var out []byte
	for {
		ch, err := st.Next()
		if err != nil {
			t.Fatalf("stream: %v (got %q)", err, out)
		}
		if ch.Exited {
			break
		}
		out = append(out, ch.Data...)
	}
	f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(string(out)), "SigIgn:"))
	if len(f) != 1 {
		t.Fatalf("output %q", out)
	}
	mask, err := strconv.ParseUint(f[0], 16, 64)
	if err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if mask&(1<<(syscall.SIGHUP-1)) != 0 {
		t.Fatalf("the session's program starts with SIGHUP ignored (SigIgn %s)", f[0])
	}
}
