package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/keeper"
)

// TestKill9BackgroundExec: a background exec started with `fleetmux exec
// --background` is found by its id after `fleetmux dev` is killed with SIGKILL
// and started again on the same data dir: the output it wrote while no agent
// ran is there, stdout and stderr apart, its exit code (5) is right though the
// new agent is not its parent, and a second one is ended by a DELETE after the
// restart; a foreground exec running when dev is killed dies with it. On the
// old code the restarted agent answered not_found, and the foreground exec's
// program lived on.
func TestKill9BackgroundExec(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv(envAddr, "")
	t.Setenv(envToken, "")
	data, err := filepath.Abs("data")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	for _, n := range []string{"go1", "go2"} {
		if err := syscall.Mkfifo(filepath.Join(work, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	endHolder(t, data)
	t.Cleanup(func() { // what a failure half-way leaves running ends
		xs, _ := keeper.Scan(filepath.Join(data, "execs"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, x := range xs {
			x.Kill()
			x.Wait(ctx)
		}
	})
	dev, addr := startDevProcess(t, data)
	token, err := os.ReadFile(filepath.Join(data, "token"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envToken, strings.TrimSpace(string(token)))
	c, err := client.New(client.Config{Addr: addr, Token: strings.TrimSpace(string(token))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, errs, err := runArgs(t, "exec", "here", "--addr", addr, "--background", "--timeout", "1ms", "--cwd", work, "-c",
		`echo one; echo uno >&2; read x < go1; echo two; echo dos >&2; : > written; read x < go2; exit 5`)
	if err != nil {
		t.Fatalf("exec --background: %v\n%s%s", err, out, errs)
	}
	node, id, ok := strings.Cut(strings.TrimSpace(out), "/")
	if !ok || node != "here" {
		t.Fatalf("exec --background printed %q", out)
	}
	sleeper, err := c.Exec(ctx, api.ExecRequest{Node: "here", Command: "echo zzz; exec sleep 300", Background: true, TimeoutMS: 1})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		r, err := c.ExecGet(ctx, "here", id, 0)
		s, err2 := c.ExecGet(ctx, "here", sleeper.ExecID, 0)
		return err == nil && err2 == nil && r.Stdout == "one\n" && r.Stderr == "uno\n" && s.Stdout == "zzz\n"
	}, "the first output")

	// A foreground exec runs as dev is killed: its program dies with the agent.
	// Where execs are sandboxed, a sandboxed exec leaves a spare wrapper started
	// ahead, and the foreground exec runs in it: it must die all the same.
	if sandbox.ABI() >= 1 && os.Geteuid() == 0 {
		if _, err := c.Exec(ctx, api.ExecRequest{Node: "here", Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, func() bool { return spareOf(dev.cmd.Process.Pid) }, "a spare wrapper of dev's")
	}
	fgDone := make(chan error, 1)
	go func() { // ends when dev does (the request fails)
		_, err := c.Exec(ctx, api.ExecRequest{Node: "here", Command: "echo $$ > fg.pid; exec sleep 300", Cwd: work, TimeoutMS: 600_000})
		fgDone <- err
	}()
	var fgPid int
	testutil.Eventually(t, 20*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(work, "fg.pid"))
		fgPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && fgPid > 0 && procAlive(fgPid)
	}, "the foreground exec to start")
	t.Cleanup(func() { // on a failure: it must not outlive the test
		if procAlive(fgPid) {
			_ = syscall.Kill(fgPid, syscall.SIGKILL)
		}
	})

	dev.kill9(t)
	if err := <-fgDone; err == nil {
		t.Fatal("the foreground exec returned though its agent was killed")
	}
	testutil.Eventually(t, 20*time.Second, func() bool { return !procAlive(fgPid) }, "the foreground exec to die with its agent")
	if err := os.WriteFile(filepath.Join(work, "go1"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(work, "written"))
		return err == nil
	}, "the exec to write while no agent runs")
	_, addr = startDevProcess(t, data)
	c, err = client.New(client.Config{Addr: addr, Token: strings.TrimSpace(string(token))})
	if err != nil {
		t.Fatal(err)
	}
	var r api.ExecResult
	testutil.Eventually(t, 30*time.Second, func() bool { // the node joins the new controller
		r, err = c.ExecGet(ctx, "here", id, 0)
		return err == nil
	}, "the exec found after the restart")
	if r.State != api.ExecRunning || r.Stdout != "one\ntwo\n" || r.Stderr != "uno\ndos\n" {
		t.Fatalf("after kill -9 and a restart: %+v", r)
	}
	if err := os.WriteFile(filepath.Join(work, "go2"), []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err = c.ExecWait(ctx, "here", id, 30_000, 0)
	if err != nil || r.State != api.ExecDone || r.ExitCode == nil || *r.ExitCode != 5 || r.Stdout != "one\ntwo\n" || r.Stderr != "uno\ndos\n" {
		t.Fatalf("wait after the restart: %+v %v", r, err)
	}
	o, err := c.ExecOutput(ctx, "here", id, api.StreamStderr, 4, 0)
	if err != nil || o.Data != "dos\n" || o.End != 8 || !o.Done {
		t.Fatalf("stderr from 4: %+v %v", o, err)
	}
	k, err := c.ExecKill(ctx, "here", sleeper.ExecID)
	if err != nil || k.State != api.ExecDone || k.Signal != "SIGKILL" || k.ExitCode == nil || *k.ExitCode != 137 {
		t.Fatalf("DELETE after the restart: %+v %v", k, err)
	}
}

// procAlive reports whether pid runs (a zombie does not).
func procAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	return i > 0 && len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// spareOf reports whether process ppid has a spare exec wrapper waiting: a
// child run as `fleetmux sandbox-exec FD --` with no program yet.
func spareOf(ppid int) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b)[i+1:])
		if i < 0 || len(f) < 2 || f[1] != strconv.Itoa(ppid) || !procAlive(pid) {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		args := strings.Split(strings.TrimSuffix(string(cmd), "\x00"), "\x00")
		if len(args) == 4 && args[1] == sandbox.Verb && args[3] == "--" {
			return true
		}
	}
	return false
}
