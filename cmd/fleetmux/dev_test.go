package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// devOut is what the last startDev printed, devAdminToken its admin token (tests
// run one at a time).
var devOut, devAdminToken string

// startDev runs `fleetmux dev` on free loopback ports until the test ends and
// returns its HTTP API URL.
func startDev(t *testing.T, extra ...string) string {
	t.Helper()
	addr, _ := startDevStop(t, extra...)
	return addr
}

// startDevStop is startDev that can also be stopped before the test ends: stop
// cancels dev (as Ctrl-C does), waits until it returned and gives what it wrote
// on stderr; later calls (and the test's cleanup) give the same.
func startDevStop(t *testing.T, extra ...string) (addr string, stop func() string) {
	t.Helper()
	needBash(t)
	// As the README runs it: a data dir relative to the cwd (the default is
	// ./.fleetmux), while the sessions start in $HOME.
	t.Chdir(t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // dev.json: this test's, not the tester's
	t.Setenv(envAddr, "")
	t.Setenv(envToken, "")
	data := "data"
	endHolder(t, data) // after dev stops (cleanups run last first)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"dev", "--data", data, "--name", "here", "--ssh-listen", "off",
			"--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0"}, extra...), &out, &errb)
	}()
	stop = sync.OnceValue(func() string {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dev: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("dev did not stop on cancel; stderr:\n%s", errb.String())
		}
		return errb.String()
	})
	t.Cleanup(func() { stop() })
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
	// The NATS URL (no secret in it) and each identity's credentials, with the CA,
	// are there for NATS clients, readable by us alone.
	for _, f := range []string{"nats.url", "creds/node.creds", "creds/controller.creds", "creds/subscriber.creds", "keys/nats-account.nk", "keys/nats-ca.key"} {
		st, err := os.Stat(filepath.Join(data, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, err, st)
		}
	}
	// The admin token, and the address and token for the CLI in dev.json: ours alone.
	tb, err := os.ReadFile(filepath.Join(data, "token"))
	if st, serr := os.Stat(filepath.Join(data, "token")); err != nil || serr != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token: %v %v %v", err, serr, st)
	}
	cfgPath := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "fleetmux", "dev.json")
	var dc devConfig
	cb, err := os.ReadFile(cfgPath)
	if err != nil || json.Unmarshal(cb, &dc) != nil || dc.Token != strings.TrimSpace(string(tb)) || dc.Addr != strings.TrimSpace(string(b)) {
		t.Fatalf("dev.json: %v %s", err, cb)
	}
	if st, err := os.Stat(cfgPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("dev.json mode: %v %v", err, st)
	}
	if st, err := os.Stat(filepath.Dir(cfgPath)); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("dev.json dir mode: %v %v", err, st)
	}
	devAdminToken = dc.Token
	// The verbs that tests run with --addr find the token in the environment; the
	// quick start unsets it, to find both in dev.json.
	t.Setenv(envToken, dc.Token)
	nb, _ := os.ReadFile(filepath.Join(data, "nats.url"))
	if u := strings.TrimSpace(string(nb)); !strings.HasPrefix(u, "nats://127.0.0.1:") || strings.Contains(u, "@") {
		t.Fatalf("nats.url: %q", nb)
	}
	return strings.TrimSpace(string(b)), stop
}

// TestDevQuickStart is the README's quick start: fleetmux dev, fleetmux new,
// fleetmux run NODE/ID -- 'echo hi; (exit 3)', and the other client verbs.
func TestDevQuickStart(t *testing.T) {
	addr := startDev(t)
	// As a user runs it: no --addr, no --token, no environment: the CLI finds
	// dev's address (a random port here) and token in dev.json. (The directory
	// stays: dev runs in this process, with a relative data dir.)
	t.Setenv(envToken, "")
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		out, errs, err := runArgs(t, args...)
		if err != nil {
			errs += err.Error()
		}
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
	if code != 0 || !strings.Contains(out, "here") || !strings.Contains(out, "alive") || !strings.Contains(out, buildVersion()) {
		t.Fatalf("nodes: %q, want the node alive with version %s", out, buildVersion())
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
	t.Setenv(envToken, devAdminToken)
	_, _, err := runArgs(t, "run", "--addr", addr, "nowhere/s1", "--", "true")
	if exitCode(err) != 255 || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("run on an unknown node: %v (exit %d)", err, exitCode(err))
	}
	_, _, err = runArgs(t, "run", "--addr", addr, "bad.name/s1", "--", "true")
	if exitCode(err) != 255 {
		t.Fatalf("a bad address: exit %d (%v), want 255 (fleetmux's own failure)", exitCode(err), err)
	}
	t.Setenv(envToken, "")
	out, _, code = cli("kill", "here/s1")
	if code != 0 || !strings.Contains(out, "here/s1") {
		t.Fatalf("kill: %q %d", out, code)
	}
}

// TestDevSubscriberReadsOutput: a plain nats.go client (not fleetmux's transport)
// with <data>/creds/subscriber.creds reads a session's output byte for byte, and
// may not reach the node's rpc. (The nats CLI is not installed here; it reads the
// same file with --creds and --tlsca.)
func TestDevSubscriberReadsOutput(t *testing.T) {
	addr := startDev(t)
	credsFile := filepath.Join("data", "creds", "subscriber.creds")
	nb, err := os.ReadFile(filepath.Join("data", "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	asyncErrs := make(chan error, 16)
	nc, err := nats.Connect(strings.TrimSpace(string(nb)), nats.UserCredentials(credsFile), nats.RootCAs(credsFile),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { asyncErrs <- err }))
	if err != nil {
		t.Fatalf("connect with subscriber.creds: %v", err)
	}
	defer nc.Close()
	var mu sync.Mutex
	var got []byte
	gaps := 0
	sub, err := nc.Subscribe("fleetmux.out.here.s1", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if off, _ := strconv.Atoi(m.Header.Get(api.HeaderOffset)); off != len(got) {
			gaps++
		}
		got = append(got, m.Data...)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	printBytesAndMatch(t, addr, "the subscriber", func(want []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Equal(got, want)
	})
	mu.Lock()
	if gaps != 0 {
		t.Errorf("%d messages out of offset order", gaps)
	}
	mu.Unlock()
	// The subscriber may not touch the node's API.
	if _, err := nc.Request("fleetmux.rpc.here.kill", []byte(`{"session":"s1"}`), time.Second); err == nil {
		t.Fatal("the subscriber's request was answered")
	}
	select {
	case err := <-asyncErrs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("async error %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no permissions violation for the rpc request")
	}
	if out, _, err := runArgs(t, "ls", "--addr", addr); err != nil || !strings.Contains(out, "here/s1") {
		t.Fatalf("the session is gone after the subscriber's kill: %q %v", out, err)
	}
}

// TestDevAPINeedsToken (issue 15 #2): dev's HTTP API, on loopback, refuses a
// request without a token (another local user's), and one with a wrong token;
// `token create` makes tokens that work at once, each with its role; a revoked
// token is refused.
func TestDevAPINeedsToken(t *testing.T) {
	addr := startDev(t)
	post := func(token string) int {
		req, _ := http.NewRequest("POST", addr+"/v1/sessions", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Fatalf("a request without a token: %d, want 401", code)
	}
	if code := post(devAdminToken + "x"); code != http.StatusUnauthorized {
		t.Fatalf("a request with a wrong token: %d, want 401", code)
	}
	resp, err := http.Get(addr + "/v1/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/nodes without a token: %d, want 401", resp.StatusCode)
	}
	out, errs, err := runArgs(t, "token", "create", "--addr", addr, "--name", "watcher", "--role", "viewer", "--ttl", "1h")
	viewer := strings.TrimSpace(out)
	if err != nil || !strings.HasPrefix(viewer, "fmx1.watcher.") {
		t.Fatalf("token create: %q %q %v", out, errs, err)
	}
	if code := post(viewer); code != http.StatusForbidden {
		t.Fatalf("a viewer's create: %d, want 403", code)
	}
	out, _, err = runArgs(t, "token", "ls", "--addr", addr)
	if err != nil || !strings.Contains(out, "watcher") || !strings.Contains(out, "viewer") || strings.Contains(out, viewer) {
		t.Fatalf("token ls: %q %v", out, err)
	}
	t.Setenv(envToken, viewer)
	if _, _, err := runArgs(t, "token", "ls", "--addr", addr); err == nil || !strings.Contains(err.Error(), "admin") {
		t.Fatalf("a viewer listed the tokens: %v", err)
	}
	t.Setenv(envToken, devAdminToken)
	if _, _, err := runArgs(t, "token", "revoke", "--addr", addr, "watcher"); err != nil {
		t.Fatal(err)
	}
	if code := post(viewer); code != http.StatusUnauthorized {
		t.Fatalf("a revoked token: %d, want 401", code)
	}
}

// printBytesAndMatch makes session here/s1 of the dev at addr print bytes that are not
// plain text (\x01, \xff, a multi-byte character), then waits until same, given the
// session's whole output from the API, says a subscriber received exactly those bytes.
func printBytesAndMatch(t *testing.T, addr, who string, same func(want []byte) bool) {
	t.Helper()
	if _, _, err := runArgs(t, "new", "--addr", addr); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runArgs(t, "run", "--addr", addr, "here/s1", "--", `printf 'bytes:\x01\xff\xe2\x82\xac:%s\n' done`); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		req, _ := http.NewRequest("GET", addr+"/v1/sessions/here/s1/output?from=0", nil)
		req.Header.Set("Authorization", "Bearer "+devAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		want, _ := io.ReadAll(resp.Body)
		return bytes.Contains(want, []byte("bytes:\x01\xff\xe2\x82\xac:done")) && same(want)
	}, "%s's bytes to equal the session's output", who)
}

// TestTokenNeverToDefault: FLEETMUX_TOKEN set without an address must not reach a
// listener on the default address (127.0.0.1:7070: anyone's, on a shared machine).
// With dev.json the token goes to dev; without, the CLI refuses and says why.
func TestTokenNeverToDefault(t *testing.T) {
	var mu sync.Mutex
	var got []string
	// A listener on the default address when it is free here; when it is not, the
	// replies below still tell where the requests went.
	if ln, err := net.Listen("tcp", strings.TrimPrefix(client.DefaultAddr, "http://")); err == nil {
		squatter := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, r.Header.Get("Authorization"))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"nodes":[],"sessions":[]}`))
		})}
		go squatter.Serve(ln)
		t.Cleanup(func() { squatter.Close() })
	} else {
		t.Logf("the default address is taken here (%v): no listener of ours there", err)
	}

	addr := startDev(t)
	t.Setenv(envToken, devAdminToken) // as a user who exported it
	out, errs, err := runArgs(t, "nodes")
	if err != nil || !strings.Contains(out, "here") {
		t.Fatalf("nodes with FLEETMUX_TOKEN and dev.json: %q %q %v (want dev's %s)", out, errs, err, addr)
	}
	os.Remove(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "fleetmux", "dev.json"))
	_, _, err = runArgs(t, "ls")
	if exitCode(err) != 2 || !strings.Contains(fmt.Sprint(err), envAddr) {
		t.Errorf("ls with FLEETMUX_TOKEN, no address, no dev.json: %v (exit %d), want a usage error naming %s", err, exitCode(err), envAddr)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range got {
		if a != "" {
			t.Errorf("the listener on the default address received %q", a)
		}
	}
}

// TestUnauthorizedSaysWhereTheTokenIs: a controller that refuses says which token
// went (none, dev's, the user's) and where one is.
func TestUnauthorizedSaysWhereTheTokenIs(t *testing.T) {
	startDev(t)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"code":"unauthorized","message":"missing API token"}}`))
	}))
	defer other.Close()
	data, _ := filepath.Abs("data")
	t.Setenv(envToken, "")
	_, _, err := runArgs(t, "ls", "--addr", other.URL)
	if e := fmt.Sprint(err); exitCode(err) == 0 || !strings.Contains(e, filepath.Join(data, "token")) || !strings.Contains(e, "fleetmux token create") || !strings.Contains(e, envToken) {
		t.Errorf("no token: %v", err)
	}
	t.Setenv(envToken, "fmx1.x.y")
	_, _, err = runArgs(t, "ls", "--addr", other.URL)
	if e := fmt.Sprint(err); !strings.Contains(e, "refused the token") || !strings.Contains(e, "fleetmux token create") {
		t.Errorf("a refused token: %v", err)
	}
}
