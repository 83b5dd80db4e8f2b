package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/internal/testutil"
)

// TestPythonClient runs clients/python's unittest suite against a real `fleetmux dev`.
func TestPythonClient(t *testing.T) {
	py := testutil.NeedTool(t, "python3")
	dir := clientDir(t, "python")
	runClientTests(t, dir, py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
}

// TestTypeScriptClient runs clients/typescript's node:test suite against a real
// `fleetmux dev`.
func TestTypeScriptClient(t *testing.T) {
	node := testutil.NeedTool(t, "node")
	dir := clientDir(t, "typescript")
	runClientTests(t, dir, node, "--test", "test/client.test.js")
}

// clientDir is the absolute path of clients/NAME (before startDev changes the cwd).
func clientDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "clients", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runClientTests starts `fleetmux dev`, and a second `fleetmux controller` of the
// same fleet (its data dir's keys and credentials) that the suite talks to:
// FLEETMUX_ADDR and FLEETMUX_TOKEN name it, and a GET of FLEETMUX_TEST_RESTART restarts
// it (stops it, answers, starts it again on the same port), so the follow tests
// resume across a real controller restart while the node and its sessions live on.
func runClientTests(t *testing.T, dir, prog string, args ...string) {
	t.Setenv("HOME", t.TempDir()) // the sessions' shells must not read the tester's rc files
	gossip := freePort(t)
	startDev(t, "--gossip-listen", gossip)
	data, err := filepath.Abs("data") // startDev's --data, in its cwd
	if err != nil {
		t.Fatal(err)
	}
	natsURL, err := os.ReadFile(filepath.Join(data, "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	b := &ctlB{t: t, listen: freePort(t), args: []string{"controller", "--name", "ctl-b", "--data", data,
		"--nats", strings.TrimSpace(string(natsURL)), "--nats-creds", filepath.Join(data, "creds", "controller.creds"),
		"--gossip-listen", "127.0.0.1:0", "--join", gossip, "--ssh-listen", "off",
		"--api-token-file", filepath.Join(data, "token")}}
	b.start()
	t.Cleanup(b.stop)
	restart := httpOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.stop()
		w.Write([]byte("stopped\n"))
		b.wg.Add(1)
		go func() { // joined by the cleanup (b.wg)
			defer b.wg.Done()
			b.start()
		}()
	}))
	t.Cleanup(b.wg.Wait)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FLEETMUX_ADDR=http://"+b.listen, "FLEETMUX_TOKEN="+devAdminToken,
		"FLEETMUX_TEST_RESTART="+restart+"/restart", "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	if testutil.WantTool(t, "vim") == "" {
		cmd.Env = append(cmd.Env, "FLEETMUX_TEST_NO_VIM=1") // the suites leave vim's screen out
	}
	out, err := cmd.CombinedOutput()
	t.Logf("%s %v:\n%s", filepath.Base(prog), args, out)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(prog), err)
	}
	if b.restarts() == 0 {
		t.Errorf("the suite never restarted the controller: its follow test did not run")
	}
}

// freePort is a loopback host:port that was free a moment ago.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// httpOn serves h on a loopback port until the test ends and returns its URL.
func httpOn(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln) // ends with Close below
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// ctlB is a `fleetmux controller` run in this process, restartable.
type ctlB struct {
	t      *testing.T
	listen string
	args   []string
	wg     sync.WaitGroup // restarts in flight

	mu     sync.Mutex // guards cancel, done, n
	cancel context.CancelFunc
	done   chan error
	n      int // starts
}

// start runs the controller and waits until it serves the API with the node alive.
func (b *ctlB) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out, errb testutil.Buffer
	go func() { done <- run(ctx, append(b.args, "--http-listen", b.listen), &out, &errb) }() // ends with cancel (stop)
	b.mu.Lock()
	b.cancel, b.done = cancel, done
	b.n++
	b.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+b.listen+"/v1/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+devAdminToken)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(string(body), `"status":"alive"`) {
				return
			}
		}
		select {
		case err := <-done:
			b.t.Errorf("controller stopped: %v\n%s", err, errb.String())
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.t.Errorf("controller did not come up with the node alive:\n%s", errb.String())
			return
		}
	}
}

// stop stops the running controller, if any, and waits for its end.
func (b *ctlB) stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.cancel, b.done = nil, nil
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			b.t.Errorf("controller: %v", err)
		}
	case <-time.After(20 * time.Second):
		b.t.Errorf("controller did not stop")
	}
}

// restarts is how many times the controller was started again.
func (b *ctlB) restarts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n - 1
}
