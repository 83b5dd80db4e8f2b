package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/replay"
)

// devProcess is `fleetmux dev` run as a process of its own (this test binary in
// fleetmux mode), so that a test can kill it with SIGKILL.
type devProcess struct {
	cmd  *exec.Cmd
	out  *testutil.Buffer
	done chan struct{}
}

// startDevProcess runs `fleetmux dev --data data` in the cwd until it is killed or
// the test ends, and returns it once it is up with its HTTP API's address.
func startDevProcess(t *testing.T, data string) (*devProcess, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(data, "http.url")) // the last dev's, killed
	var out testutil.Buffer
	cmd := exec.Command(exe, "dev", "--data", data, "--name", "here", "--ssh-listen", "off",
		"--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProcess{cmd: cmd, out: &out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
			t.Errorf("dev did not stop on SIGTERM:\n%s", out.String())
		}
	})
	testutil.Eventually(t, 60*time.Second, func() bool {
		select {
		case <-p.done:
			t.Fatalf("dev stopped:\n%s", out.String())
		default:
		}
		return strings.Contains(out.String(), "fleetmux dev is up")
	}, "dev to come up")
	b, err := os.ReadFile(filepath.Join(data, "http.url"))
	if err != nil {
		t.Fatal(err)
	}
	return p, strings.TrimSpace(string(b))
}

// kill9 ends dev with SIGKILL: no Detach, no last flush, no goodbye to the holder.
func (p *devProcess) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("dev did not end on SIGKILL")
	}
}

// TestKill9BlocksAndRedaction: a session with commands typed into a program (a
// nested sh: blocks without exit codes, which no shell mark shows) and a key
// printed under a redact rule. The policy is removed, `fleetmux dev` killed with
// SIGKILL and started again on the same data dir (its holder kept the session):
// `fleetmux blocks` prints exactly what it printed before, and the key is nowhere
// in `block`, `screen`, `logs`, an attach or the API. Before, the restarted agent
// rebuilt the blocks from the holder's raw output: the typed blocks were gone,
// "sleep 40" had become block 3 (block 5: "no such block") and the key was back
// in full everywhere.
func TestKill9BlocksAndRedaction(t *testing.T) {
	needBash(t)
	t.Chdir(t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv(envAddr, "")
	t.Setenv(envToken, "")
	data, err := filepath.Abs("data")
	if err != nil {
		t.Fatal(err)
	}
	endHolder(t, data) // after the devs stop (cleanups run last first)
	dev, addr := startDevProcess(t, data)
	token, err := os.ReadFile(filepath.Join(data, "token"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envToken, strings.TrimSpace(string(token)))
	cli := func(args ...string) (string, int) {
		t.Helper()
		i := slices.Index(args, "--") // the flag before the command's words
		if i < 0 {
			i = len(args)
		}
		out, errs, err := runArgs(t, slices.Concat(args[:i], []string{"--addr", addr}, args[i:])...)
		return out + errs, exitCode(err)
	}
	must := func(args ...string) string {
		t.Helper()
		out, code := cli(args...)
		if code != 0 {
			t.Fatalf("fleetmux %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	const key, redactedKey = "AKIAIOSFODNN7EXAMPLE", "[REDACTED:aws-key]"
	if err := os.WriteFile("policy.yaml", []byte("version: 1\nrules:\n  - name: default\n    action: allow\nredact:\n  - {name: aws-key, pattern: 'AKIA[0-9A-Z]{16}'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must("policy", "set", "policy.yaml")
	if out := must("new"); out != "here/s1\n" {
		t.Fatalf("new: %q", out)
	}
	// The node applies a new policy within a second: until then the key is printed.
	var first string
	testutil.Eventually(t, 10*time.Second, func() bool {
		out := must("run", "here/s1", "--", "printf '%s%s\\n' AKIAIOSFOD NN7EXAMPLE")
		first = out
		return strings.Contains(out, redactedKey)
	}, "the key to be redacted")
	if strings.Contains(first, key) {
		t.Fatalf("run printed the key under the policy: %q", first)
	}
	if out, code := cli("run", "here/s1", "--timeout", "100ms", "--", "sh"); code != 124 {
		t.Fatalf("sh: exit %d (want 124: it keeps running)\n%s", code, out)
	}
	must("wait", "here/s1", "--until", "waiting_input", "--timeout", "20s")
	if out, code := cli("run", "here/s1", "--", "echo typed"); code != 254 || !strings.Contains(out, "typed") {
		t.Fatalf("typed into sh: exit %d (want 254: unknown)\n%s", code, out)
	}
	if out, code := cli("run", "here/s1", "--", "exit"); code != 254 {
		t.Fatalf("exit typed into sh: exit %d (want 254)\n%s", code, out)
	}
	must("wait", "here/s1", "--until", "idle", "--timeout", "20s")
	if out, code := cli("run", "here/s1", "--timeout", "100ms", "--", "sleep 40"); code != 124 {
		t.Fatalf("sleep 40: exit %d (want 124)\n%s", code, out)
	}
	must("policy", "rm")
	before := must("blocks", "here/s1", "--json")
	var list struct{ Blocks []map[string]any }
	if err := json.Unmarshal([]byte(before), &list); err != nil || len(list.Blocks) != 5 {
		t.Fatalf("blocks before: %v\n%s", err, before)
	}
	// What the agent keeps for a restart goes out as it works, not at its end:
	// the recording (flushed once caught up) and its checkpoint in the holder
	// (sent after each block's start or end). A kill -9 that comes before they are
	// out is a kill within milliseconds of the command; wait for them here (at
	// most 20 s: an agent that never leaves a checkpoint fails below, on what it
	// rebuilds).
	var off int64
	testutil.Eventually(t, 20*time.Second, func() bool {
		_, end := sessionOffsets(t, addr)
		return recordedBlocks(data, "s1") == 4 && recordingEnd(data, "s1") >= end
	}, "the recording to have the blocks")
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		var blocks int
		if blocks, off = holderCheckpoint(t, data, "s1"); blocks == 5 {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the holder: there is nothing to wait on
	}
	dev.kill9(t)

	_, addr = startDevProcess(t, data)
	after := must("blocks", "here/s1", "--json")
	if after != before {
		t.Errorf("blocks after kill -9 and a restart (the holder's checkpoint at %d):\n%s\nbefore:\n%s", off, after, before)
	}
	noKey := func(where, what string) {
		t.Helper()
		if strings.Contains(what, key) {
			t.Errorf("%s has the key after the restart: %q", where, what)
		}
	}
	noKey("screen", must("screen", "here/s1", "--json"))
	logs := must("logs", "here/s1")
	noKey("logs", logs)
	if !strings.Contains(logs, redactedKey) {
		t.Errorf("logs after the restart lack %s: %q", redactedKey, logs)
	}
	for _, path := range []string{"/v1/sessions/here/s1", "/v1/sessions/here/s1/blocks", "/v1/sessions/here/s1/blocks/1",
		"/v1/sessions/here/s1/screen", "/v1/sessions/here/s1/output?from=0"} {
		noKey("GET "+path, apiGet(t, addr, path))
	}
	// An attach from the first byte: the whole output, as the session has it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(client.Config{Addr: addr, Token: strings.TrimSpace(string(token))})
	if err != nil {
		t.Fatal(err)
	}
	from := int64(0)
	ac, err := c.Attach(ctx, "here", "s1", client.AttachOptions{From: &from})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	var seen []byte
	buf := make([]byte, 32<<10)
	for !strings.Contains(string(seen), "typed") || !strings.Contains(string(seen), "sleep 40") {
		n, err := ac.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			t.Fatalf("attach: %v after %q", err, seen)
		}
	}
	noKey("attach", string(seen))
	if !strings.Contains(string(seen), redactedKey) {
		t.Errorf("the attach lacks %s: %q", redactedKey, seen)
	}
	for n := 1; n <= 5; n++ {
		noKey("block "+strconv.Itoa(n), must("block", "here/s1", strconv.Itoa(n), "--json"))
	}
	if out := must("block", "here/s1", "1"); !strings.Contains(out, redactedKey) {
		t.Errorf("block 1 after the restart: %q, want %s", out, redactedKey)
	}
}

// apiGet is the body of an authorized GET of the HTTP API (a failure is fatal).
func apiGet(t *testing.T, addr, path string) string {
	t.Helper()
	req, err := http.NewRequest("GET", addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv(envToken))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", path, resp.Status, b)
	}
	return string(b)
}

// holderCheckpoint is the number of blocks and the output offset of session id's
// newest checkpoint in the holder (the metadata the agent leaves there); 0, 0:
// none.
func holderCheckpoint(t *testing.T, data, id string) (blocks int, off int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := holder.Dial(ctx, holderDir(data))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range list {
		var m struct {
			Checkpoints []struct {
				Blocks int   `json:"blocks"`
				Off    int64 `json:"off"`
			} `json:"checkpoints"`
		}
		if h.ID == id && json.Unmarshal(h.Meta, &m) == nil && len(m.Checkpoints) > 0 {
			c := m.Checkpoints[len(m.Checkpoints)-1]
			return c.Blocks, c.Off
		}
	}
	return 0, 0
}

// sessionOffsets is session here/s1's output offset and block count, from the API.
func sessionOffsets(t *testing.T, addr string) (blocks int, end int64) {
	t.Helper()
	var info struct {
		Blocks       int   `json:"blocks"`
		OutputOffset int64 `json:"output_offset"`
	}
	if err := json.Unmarshal([]byte(apiGet(t, addr, "/v1/sessions/here/s1")), &info); err != nil {
		t.Fatal(err)
	}
	return info.Blocks, info.OutputOffset
}

// recordingEnd is the output offset session id's recording ends at.
func recordingEnd(data, id string) int64 {
	rec, err := replay.Open(filepath.Join(data, "sessions", id, "output.cast"))
	if err != nil {
		return 0
	}
	defer rec.Close()
	return rec.Header().Offset + rec.End()
}

// recordedBlocks is how many blocks session id's recording has indexed.
func recordedBlocks(data, id string) int {
	idx, err := replay.OpenIndex(filepath.Join(data, "sessions", id, "output.cast"))
	if err != nil {
		return 0
	}
	return len(idx)
}
