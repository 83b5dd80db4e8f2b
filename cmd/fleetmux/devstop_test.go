package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// heldPIDs is what the holder serving data holds: session id to its program's pid
// (running ones only), and the holder's own pid.
func heldPIDs(t *testing.T, data string) (map[string]int, int) {
	t.Helper()
	abs, err := filepath.Abs(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := holder.Dial(ctx, holderDir(abs))
	if err != nil {
		t.Fatalf("no holder for %s: %v", data, err)
	}
	defer c.Close()
	_, pid := c.HolderVersion()
	l, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, in := range l {
		if !in.Exited {
			m[in.ID] = in.PID
		}
	}
	return m, pid
}

// alive reports whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// TestDevStop: Ctrl-C of dev names the sessions that keep running in its holder
// and how to end them; `fleetmux dev stop` then ends that holder and its sessions'
// programs, and nothing else: the holder of another data dir and its session keep
// running.
func TestDevStop(t *testing.T) {
	addr, stopDev := startDevStop(t)
	if out, errs, err := runArgs(t, "new", "--addr", addr, "--title", "build"); err != nil || out != "here/s1\n" {
		t.Fatalf("new: %q %q %v", out, errs, err)
	}
	held, devHolder := heldPIDs(t, "data")
	shell := held["s1"]
	if shell <= 0 || !alive(shell) {
		t.Fatalf("dev's holder holds %v, want s1 running", held)
	}

	// Another holder, of another data dir, with a program of its own.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	endHolder(t, other)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	oc, err := holder.Ensure(ctx, holderDir(other), []string{exe, "holder", "--data", other})
	if err != nil {
		t.Fatal(err)
	}
	_, master, err := oc.Spawn(ctx, holder.Spawn{ID: "s1", Argv: []string{"/bin/sh", "-c", "sleep 600"}, Dir: "/", Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	master.Close()
	oc.Close()
	otherHeld, otherHolder := heldPIDs(t, other)
	if otherHeld["s1"] <= 0 || otherHolder == devHolder {
		t.Fatalf("other holder %d holds %v", otherHolder, otherHeld)
	}

	// Ctrl-C: dev says what keeps running and how to end it; it does keep running.
	errs := stopDev()
	for _, want := range []string{"1 session(s) keep running in the holder", `s1 "build"`, "fleetmux dev --data data ", "fleetmux dev stop --data data "} {
		if !strings.Contains(errs, want) {
			t.Errorf("dev's exit note lacks %q:\n%s", want, errs)
		}
	}
	if !alive(shell) || !alive(devHolder) {
		t.Fatalf("dev's session (pid %d, alive %v) or holder (pid %d, alive %v) ended with dev", shell, alive(shell), devHolder, alive(devHolder))
	}

	out, errOut, err := runArgs(t, "dev", "stop", "--data", "data")
	if err != nil || !strings.Contains(out, "stopped the holder of data") || !strings.Contains(out, `s1 "build"`) {
		t.Fatalf("dev stop: %q %q %v", out, errOut, err)
	}
	if alive(devHolder) {
		t.Errorf("dev stop returned with the holder (pid %d) still running", devHolder)
	}
	// The holder ends its sessions' programs before it exits; the shell may stay
	// a zombie until init reaps it, never a running process.
	testutil.Eventually(t, 10*time.Second, func() bool { return !alive(shell) }, "dev's shell to end")
	if _, err := os.Stat(filepath.Join("data", "holder", holder.SocketName)); err == nil {
		abs, _ := filepath.Abs("data")
		if c, err := holder.Dial(ctx, holderDir(abs)); err == nil {
			c.Close()
			t.Errorf("a holder still answers on dev's socket")
		}
	}
	if !alive(otherHolder) || !alive(otherHeld["s1"]) {
		t.Fatalf("dev stop ended another data dir's holder (alive %v) or its session (alive %v)", alive(otherHolder), alive(otherHeld["s1"]))
	}
	if h, _ := heldPIDs(t, other); h["s1"] != otherHeld["s1"] {
		t.Fatalf("the other holder holds %v, want s1 as before", h)
	}

	// Nothing left to stop: said so, exit 0.
	out, errOut, err = runArgs(t, "dev", "stop", "--data", "data")
	if err != nil || !strings.Contains(out, "no holder runs for data") {
		t.Fatalf("dev stop again: %q %q %v", out, errOut, err)
	}
	if out, _, err := runArgs(t, "dev", "stop", "--data", t.TempDir()); err != nil || !strings.Contains(out, "nothing to stop") {
		t.Fatalf("dev stop of a data dir without a holder: %q %v", out, err)
	}
}
