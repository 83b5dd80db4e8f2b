package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// devOut is what the last startDev printed (tests run one at a time).
var devOut string

// startDev runs `fleetmux dev` on free loopback ports until the test ends and
// returns its HTTP API URL.
func startDev(t *testing.T, extra ...string) string {
	t.Helper()
	needBash(t)
	// As the README runs it: a data dir relative to the cwd (the default is
	// ./.fleetmux), while the sessions start in $HOME.
	t.Chdir(t.TempDir())
	data := "data"
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"dev", "--data", data, "--name", "here", "--ssh-listen", "off",
			"--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0"}, extra...), &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dev: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("dev did not stop on cancel; stderr:\n%s", errb.String())
		}
	})
	testutil.Eventually(t, 30*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("dev stopped: %v\n%s", err, errb.String())
		default:
		}
		return strings.Contains(out.String(), "fleetmux dev is up")
	}, "dev to come up")
	devOut = out.String()
	b, err := os.ReadFile(filepath.Join(data, "http.url"))
	if err != nil {
		t.Fatal(err)
	}
	// The NATS URL with its token is there for NATS clients, readable by us alone.
	st, err := os.Stat(filepath.Join(data, "nats.url"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("nats.url: %v %v", err, st)
	}
	nb, _ := os.ReadFile(filepath.Join(data, "nats.url"))
	if !strings.Contains(string(nb), "@127.0.0.1:") {
		t.Fatalf("nats.url has no credentials: %q", nb)
	}
	return strings.TrimSpace(string(b))
}

// TestDevQuickStart is the README's quick start: fleetmux dev, fleetmux new,
// fleetmux run NODE/ID -- 'echo hi; exit 3', and the other client verbs.
func TestDevQuickStart(t *testing.T) {
	addr := startDev(t)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		out, errs, err := runArgs(t, append([]string{args[0], "--addr", addr}, args[1:]...)...)
		return out, errs, exitCode(err)
	}

	out, errs, code := cli("new")
	if code != 0 || out != "here/s1\n" {
		t.Fatalf("new: %q %q %d", out, errs, code)
	}
	out, errs, code = cli("run", "here/s1", "--", "echo hi; (exit 3)")
	if code != 3 || out != "hi\n" {
		t.Fatalf("run: %q %q exit %d, want hi and 3", out, errs, code)
	}
	out, _, code = cli("run", "here/s1", "--json", "--", "pwd")
	var br api.BlockResult
	if code != 0 || json.Unmarshal([]byte(out), &br) != nil || br.Block.N != 2 || br.Block.ExitCode == nil {
		t.Fatalf("run --json: %q %d", out, code)
	}
	out, _, code = cli("nodes")
	if code != 0 || !strings.Contains(out, "here") || !strings.Contains(out, "alive") {
		t.Fatalf("nodes: %q", out)
	}
	out, _, code = cli("ls")
	if code != 0 || !strings.Contains(out, "here/s1") {
		t.Fatalf("ls: %q", out)
	}
	out, _, code = cli("blocks", "here/s1")
	if code != 0 || !strings.Contains(out, "echo hi; (exit 3)") {
		t.Fatalf("blocks: %q", out)
	}
	out, _, code = cli("block", "here/s1", "1")
	if code != 0 || out != "hi\n" {
		t.Fatalf("block 1: %q", out)
	}
	_, _, code = cli("send", "here/s1", "--enter", "echo typed-$((2*21))")
	if code != 0 {
		t.Fatalf("send: %d", code)
	}
	_, _, code = cli("wait", "here/s1", "--until", "idle", "--timeout", "10s")
	if code != 0 {
		t.Fatalf("wait: %d", code)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		out, _, _ := cli("screen", "here/s1")
		return strings.Contains(out, "typed-42")
	}, "the typed command on the screen")
	out, _, code = cli("logs", "here/s1")
	if code != 0 || !strings.Contains(out, "typed-42") {
		t.Fatalf("logs: %d %q", code, out)
	}
	// Fan-out to every node: one line per host, exit status of the command.
	out, _, code = cli("run", "--all", "--", "echo fan")
	if code != 0 || !strings.Contains(out, "here/") || !strings.Contains(out, "ok=1 failed=0") {
		t.Fatalf("run --all: %q %d", out, code)
	}
	out, _, code = cli("run", "--all", "--", "exit 4")
	if code == 0 {
		t.Fatalf("a failing fan-out exited 0: %q", out)
	}
	// Errors: a clear message and a meaningful exit code.
	_, _, err := runArgs(t, "run", "--addr", addr, "nowhere/s1", "--", "true")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("run on an unknown node: %v (exit %d)", err, exitCode(err))
	}
	_, _, err = runArgs(t, "run", "--addr", addr, "bad.name/s1", "--", "true")
	if exitCode(err) != 2 {
		t.Fatalf("a bad address: exit %d (%v), want 2", exitCode(err), err)
	}
	out, _, code = cli("kill", "here/s1")
	if code != 0 || !strings.Contains(out, "here/s1") {
		t.Fatalf("kill: %q %d", out, code)
	}
}
