package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
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
// FLEETMUX_ADDR and FLEETMUX_TOKEN name it. FLEETMUX_TEST_CONTROL is the URL of
// fleetControl, through which the suite provokes what a client cannot by itself:
// a controller restart (the follow tests), a node that goes away (unavailable) and
// a node whose data dir refuses a session (internal). The suite writes the error
// codes the controller answered it to the file FLEETMUX_TEST_CODES: each of the
// API's codes must be there.
//
// The dev node keeps a session's recording in two parts of 1 MiB, so output beyond
// its 8 MiB scrollback and those parts is gone for good (gone).
func runClientTests(t *testing.T, dir, prog string, args ...string) {
	t.Setenv("HOME", t.TempDir()) // the sessions' shells must not read the tester's rc files
	gossip := freePort(t)
	startDev(t, "--gossip-listen", gossip, "--recording-max-bytes", "1048576", "--recording-parts", "2")
	data, err := filepath.Abs("data") // startDev's --data, in its cwd
	if err != nil {
		t.Fatal(err)
	}
	natsURL, err := os.ReadFile(filepath.Join(data, "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	nats := strings.TrimSpace(string(natsURL))
	listen := freePort(t)
	b := &proc{t: t, what: "controller ctl-b", args: []string{"controller", "--name", "ctl-b", "--data", data,
		"--nats", nats, "--nats-creds", filepath.Join(data, "creds", "controller.creds"),
		"--gossip-listen", "127.0.0.1:0", "--join", gossip, "--ssh-listen", "off",
		"--api-token-file", filepath.Join(data, "token"), "--http-listen", listen},
		ready: func() bool { return nodeStatus(listen, "here") == api.NodeAlive }}
	b.start()
	t.Cleanup(b.stop)
	fc := &fleetControl{t: t, b: b, data: data, name2: "here2", node2: enrollNode(t, data, "here2", nats, gossip, listen)}
	t.Cleanup(fc.node2.stop)
	control := httpOn(t, fc)
	t.Cleanup(fc.wg.Wait)
	codes := filepath.Join(t.TempDir(), "codes")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FLEETMUX_ADDR=http://"+listen, "FLEETMUX_TOKEN="+devAdminToken,
		"FLEETMUX_TEST_CONTROL="+control, "FLEETMUX_TEST_CODES="+codes, "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	if testutil.WantTool(t, "vim") == "" {
		cmd.Env = append(cmd.Env, "FLEETMUX_TEST_NO_VIM=1") // the suites leave vim's screen out
	}
	out, err := cmd.CombinedOutput()
	t.Logf("%s %v:\n%s", filepath.Base(prog), args, out)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(prog), err)
	}
	// Every error code the API has came back from the controller at least once: the
	// suite writes the codes of the error replies it got, one a line.
	seen, err := os.ReadFile(codes)
	if err != nil {
		t.Errorf("the suite did not write the error codes it saw: %v", err)
	}
	for _, code := range api.ErrorCodes() {
		if !slices.Contains(strings.Fields(string(seen)), code) {
			t.Errorf("the suite never got error code %s from the controller", code)
		}
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, what := range []string{"restart", "node2/stop", "disk/break"} {
		if fc.done[what] == 0 {
			t.Errorf("the suite never asked for %s: a test that needs it did not run", what)
		}
	}
}

// fleetControl serves the suite's requests to change the fleet under test (GET
// /PATH, each answered once done):
//
//	/restart      stops controller B, answers, and starts it again on the same port
//	              (the node and its sessions live on)
//	/node2/start  starts a second node and answers its name when B lists it alive
//	/node2/stop   stops it (its sessions end with it): requests to it then fail
//	/disk/break   puts a file where the dev node's next session directory goes, so
//	              the node cannot record that session and fails its creation
//	/disk/fix     removes that file
type fleetControl struct {
	t     *testing.T
	b     *proc // controller B
	node2 *proc
	name2 string         // node2's name
	data  string         // the dev node's data dir
	wg    sync.WaitGroup // restarts in flight

	mu   sync.Mutex     // guards done, taken
	done map[string]int // requests served, by path
	// taken is the file /disk/break made ("" when none).
	taken string
}

func (f *fleetControl) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	what := strings.TrimPrefix(r.URL.Path, "/")
	f.mu.Lock()
	defer f.mu.Unlock()
	switch what {
	case "restart":
		f.b.stop()
		f.wg.Add(1)
		go func() { // joined by the cleanup (f.wg)
			defer f.wg.Done()
			f.b.start()
		}()
	case "node2/start":
		f.node2.start()
	case "node2/stop":
		f.node2.stop()
	case "disk/break":
		next, err := os.ReadFile(filepath.Join(f.data, "next-session-id"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f.taken = filepath.Join(f.data, "sessions", "s"+strings.TrimSpace(string(next)))
		if err := os.WriteFile(f.taken, []byte("not a directory\n"), 0o600); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	case "disk/fix":
		if f.taken != "" {
			os.Remove(f.taken)
			f.taken = ""
		}
	default:
		http.NotFound(w, r)
		return
	}
	if f.done == nil {
		f.done = map[string]int{}
	}
	f.done[what]++
	if what == "node2/start" {
		fmt.Fprintln(w, f.name2)
		return
	}
	fmt.Fprintf(w, "%s: done\n", what)
}

// enrollNode enrolls a node called name in the dev fleet of data, and returns it
// ready to start: it connects to nats, joins gossip, and is ready when the
// controller serving the API on listen lists it alive.
func enrollNode(t *testing.T, data, name, nats, gossip, listen string) *proc {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	creds := filepath.Join(dir, name+".creds")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runArgs(t, "enroll", "node", name, "--data", data, "--out", creds); err != nil {
		t.Fatal(err)
	}
	copyKeys(t, filepath.Join(dir, name+".keys"), filepath.Join(dir, "data", "keys")) // fleet.pub, gossip.key
	endHolder(t, filepath.Join(dir, "data"))
	return &proc{t: t, what: "node " + name, args: []string{"node", "--name", name, "--data", filepath.Join(dir, "data"),
		"--nats", nats, "--nats-creds", creds, "--gossip-listen", "127.0.0.1:0", "--join", gossip},
		ready: func() bool { return nodeStatus(listen, name) == api.NodeAlive }}
}

// nodeStatus is node's status in GET /v1/nodes of the controller on listen ("" when
// it is not listed or the controller does not answer).
func nodeStatus(listen, node string) string {
	req, _ := http.NewRequest("GET", "http://"+listen+"/v1/nodes", nil)
	req.Header.Set("Authorization", "Bearer "+devAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var list struct{ Nodes []api.Node }
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&list) != nil {
		return ""
	}
	for _, n := range list.Nodes {
		if n.Name == node {
			return n.Status
		}
	}
	return ""
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

// proc is a fleetmux server (`run` with args) in this process, restartable.
type proc struct {
	t     *testing.T
	what  string
	args  []string
	ready func() bool // polled after a start until it holds

	mu     sync.Mutex // guards cancel, done, errb
	cancel context.CancelFunc
	done   chan error
	errb   *testutil.Buffer
}

// start runs the server and waits until it is ready.
func (p *proc) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out, errb testutil.Buffer
	go func() { done <- run(ctx, p.args, &out, &errb) }() // ends with cancel (stop)
	p.mu.Lock()
	p.cancel, p.done, p.errb = cancel, done, &errb
	p.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for !p.ready() {
		select {
		case err := <-done:
			p.t.Errorf("%s stopped: %v\n%s", p.what, err, errb.String())
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Errorf("%s was not ready within 30s:\n%s", p.what, errb.String())
			return
		}
	}
}

// stop stops the running server, if any, and waits for its end.
func (p *proc) stop() {
	p.mu.Lock()
	cancel, done, errb := p.cancel, p.done, p.errb
	p.cancel, p.done = nil, nil
	p.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			p.t.Errorf("%s: %v\n%s", p.what, err, errb.String())
		}
	case <-time.After(20 * time.Second):
		p.t.Errorf("%s did not stop", p.what)
	}
}
