package fleet_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/trust"
)

// fleetmuxBin is the fleetmux binary TestMain builds; binDir is the directory it
// removes when the tests end (other built programs go there too).
var fleetmuxBin, binDir string

// TestMain builds the fleetmux binary once (FLEETMUX_TEST_BIN names a prebuilt one
// instead), runs the tests, then checks for leaked
// goroutines as testutil.MainWithLeakCheck does. It does not call MainWithLeakCheck
// itself because that ends with os.Exit, which would leave the binary's temporary
// directory behind; the semantics are the same: the leak check runs after a passing
// run and turns it into a failure.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleetmux-fleet-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	bin, err := os.Getenv("FLEETMUX_TEST_BIN"), error(nil)
	if bin == "" {
		bin, err = testutil.BuildFleetmux(dir)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: build fleetmux: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	fleetmuxBin, binDir = bin, dir
	code := m.Run()
	if code == 0 {
		if leaked := testutil.LeakCheck(5 * time.Second); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %d goroutines leaked after the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one fleetmux process.
type proc struct {
	name   string // e.g. "n2#2": the second process of node n2
	argv   []string
	cmd    *exec.Cmd
	stdout *testutil.Buffer
	stderr *testutil.Buffer
	cancel context.CancelFunc
	done   chan struct{} // closed when the process has been waited for
	err    error         // Wait's error, after done
	mu     sync.Mutex
	killed bool // the test stopped it on purpose
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process unless it has exited.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	if !p.exited() {
		p.cmd.Process.Signal(sig)
	}
}

func (p *proc) wasKilled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// fleet is the processes of one test, their network and the HTTP client.
type fleet struct {
	t    *testing.T
	root string // temp dir: data dirs, homes
	net  *network
	hc   *http.Client
	keys string // the fleet root's public key and the controllers' signing key and certificate (testutil.Trust.WriteFiles)

	mu    sync.Mutex
	procs []*proc
	runs  map[string]int // processes started per name
}

func newFleet(t *testing.T, root string, nw *network) *fleet {
	f := &fleet{
		t:    t,
		root: root,
		net:  nw,
		hc:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}},
		runs: map[string]int{},
		keys: filepath.Join(root, "keys"),
	}
	testutil.NewTrust(t).WriteFiles(t, f.keys)
	t.Cleanup(f.stopAll)
	return f
}

// env is the hermetic environment of a fleetmux process: its own HOME (so no user rc
// file runs in its shells), a fixed PATH and locale, nothing else inherited.
func (f *fleet) env(name string) []string {
	home := filepath.Join(f.root, "home-"+name)
	if err := os.MkdirAll(home, 0o700); err != nil {
		f.t.Fatal(err)
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return []string{
		"HOME=" + home,
		"PATH=" + path,
		"LANG=C.UTF-8",
		"SHELL=/bin/bash",
		"USER=" + currentUser(),
		"TMPDIR=" + os.TempDir(),
		// The controllers' bootstrap admin token (every API request needs one).
		"FLEETMUX_TOKEN=" + fleetToken,
	}
}

// fleetToken is the controllers' bootstrap API token, which apiClient sends.
const fleetToken = "fleet-test-bootstrap-token"

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if os.Geteuid() == 0 {
		return "root"
	}
	return "fleetmux"
}

// run runs `fleetmux ARGS...` to completion (a setup command: init, enroll) and
// fails the test when it fails.
func (f *fleet) run(args ...string) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, fleetmuxBin, args...)
	cmd.Env = f.env("setup")
	cmd.Dir = f.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("fleetmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// installKeys copies the files of an enrollment's keys bundle into a data dir's
// keys directory, modes kept (fleetmux enroll writes the bundle; a process reads
// DIR/keys/).
func installKeys(t *testing.T, bundle, keysDir string) {
	t.Helper()
	if err := os.MkdirAll(keysDir, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(bundle, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(keysDir, e.Name()), b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// start starts `fleetmux ARGS...` as the process called name, in network namespace
// ns when ns is not empty.
func (f *fleet) start(name, ns string, args ...string) *proc {
	f.t.Helper()
	if len(args) > 0 && args[0] == "controller" && !slices.Contains(args, "--ssh-listen") {
		// No SSH front door: its default port is fixed (and the test homes have no keys).
		args = append(slices.Clone(args), "--ssh-listen", "off")
	}
	// Every process trusts the fleet's root: controllers sign with its certificate,
	// nodes check against its public key.
	if len(args) > 0 && args[0] == "controller" && !slices.Contains(args, "--signing-key") {
		args = append(slices.Clone(args), "--signing-key", filepath.Join(f.keys, trust.ControllerKeyFile), "--signing-cert", filepath.Join(f.keys, trust.ControllerCertFile))
	}
	if len(args) > 0 && args[0] == "node" && !slices.Contains(args, "--trust-root") {
		args = append(slices.Clone(args), "--trust-root", filepath.Join(f.keys, trust.RootPubFile))
	}
	// No holder unless the test asks for one (--holder, e.g. TestHolderSurvivesAgent,
	// which runs its own): a node's holder is detached, so it would outlive the test.
	if len(args) > 0 && args[0] == "node" && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--holder") }) {
		args = append(slices.Clone(args), "--holder=false")
	}
	return f.spawn(name, ns, append([]string{fleetmuxBin}, args...)...)
}

// spawn starts argv (any program: fleetmux, nats-server) as the process called
// name, in network namespace ns when ns is not empty, with the hermetic
// environment of env.
func (f *fleet) spawn(name, ns string, argv ...string) *proc {
	f.t.Helper()
	f.mu.Lock()
	f.runs[name]++
	label := fmt.Sprintf("%s#%d", name, f.runs[name])
	f.mu.Unlock()
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = f.env(name)
	cmd.Dir = f.root
	p := &proc{name: label, argv: argv, cmd: cmd, stdout: &testutil.Buffer{}, stderr: &testutil.Buffer{}, cancel: cancel, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.WaitDelay = 5 * time.Second
	// Dies with the test binary even when it is killed before its cleanups run (a
	// -timeout panic, Ctrl-C). `ip netns exec` execs the program, which keeps this.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cancel()
		f.t.Fatalf("start %s: %v", label, err)
	}
	go func() { // owned by p: ends when the process is waited for
		p.err = cmd.Wait()
		close(p.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

// kill SIGKILLs p and waits until it is gone.
func (f *fleet) kill(p *proc) {
	f.t.Helper()
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		f.t.Fatalf("%s did not die within 10s of SIGKILL", p.name)
	}
}

// checkRunning fails the test when a process the test did not stop has exited.
func (f *fleet) checkRunning() {
	f.t.Helper()
	f.mu.Lock()
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	for _, p := range procs {
		if p.exited() && !p.wasKilled() {
			f.t.Fatalf("%s exited unexpectedly (%v); stderr:\n%s", p.name, p.err, p.stderr.String())
		}
	}
}

// eventually is testutil.Eventually that also fails at once when a process died.
func (f *fleet) eventually(timeout time.Duration, cond func() bool, msg string, args ...any) {
	f.t.Helper()
	testutil.Eventually(f.t, timeout, func() bool {
		f.checkRunning()
		return cond()
	}, msg, args...)
}

// stopAll stops every process still running, the last started first: SIGTERM, then
// SIGKILL after a grace. A process that needs the SIGKILL is reported (shutting
// down must not hang). On failure it logs every process's output.
func (f *fleet) stopAll() {
	f.mu.Lock()
	procs := append([]*proc(nil), f.procs...)
	f.mu.Unlock()
	const grace = 10 * time.Second
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if p.exited() {
			p.cancel()
			continue
		}
		start := time.Now()
		p.signal(syscall.SIGTERM)
		select {
		case <-p.done:
			f.t.Logf("%s stopped by SIGTERM in %v (%v)", p.name, time.Since(start).Round(time.Millisecond), p.err)
		case <-time.After(grace):
			f.t.Errorf("%s did not exit within %v of SIGTERM: killing it", p.name, grace)
			p.cancel() // SIGKILL
			<-p.done
		}
		p.cancel()
	}
	f.hc.CloseIdleConnections()
	if f.t.Failed() || os.Getenv("FLEETMUX_TEST_LOGS") != "" {
		for _, p := range procs {
			f.t.Logf("==== %s: %s (exit: %v)\n-- stdout:\n%s\n-- stderr:\n%s", p.name, strings.Join(p.argv, " "), p.err, p.stdout.String(), p.stderr.String())
		}
	}
}

var httpAPILine = regexp.MustCompile(`HTTP API: (http://\S+)`)

// waitHTTPAPI waits for the "HTTP API: URL" line of a controller and returns URL.
func (f *fleet) waitHTTPAPI(p *proc, timeout time.Duration) string {
	f.t.Helper()
	var url string
	f.eventually(timeout, func() bool {
		if m := httpAPILine.FindStringSubmatch(p.stdout.String()); m != nil {
			url = m[1]
			return true
		}
		return false
	}, "%s prints its HTTP API address", p.name)
	return url
}

// network is where the processes live: network namespaces on a bridge (as root), or
// loopback.
type network struct {
	netns  bool
	hostIP string            // the controllers' NATS and gossip listen here
	nodeIP map[string]string // node name → its address
	nodeNS map[string]string // node name → its network namespace ("" on loopback)
}

// setupNetwork gives every node its own network namespace with an address on a
// bridge of the host (10.213.X.0/24, X random), when running as root with `ip`; it
// falls back to loopback otherwise (a failure under FLEETMUX_TEST_STRICT=1), or with
// FLEETMUX_TEST_NO_NETNS set. Everything
// is deleted when the test ends.
func setupNetwork(t *testing.T, nodes []string) *network {
	lo := loopback(nodes)
	switch {
	case os.Getenv("FLEETMUX_TEST_NO_NETNS") != "":
		t.Log("network namespaces skipped (FLEETMUX_TEST_NO_NETNS set): everything on loopback")
		return lo
	case !testutil.WantRoot(t) || testutil.WantTool(t, "ip") == "":
		t.Log("network namespaces skipped (they need root and ip): everything on loopback")
		return lo
	}
	nw, cleanup, err := makeNamespaces(nodes)
	if err != nil {
		cleanup()
		t.Logf("network namespaces skipped (%v): everything on loopback", err)
		return lo
	}
	t.Cleanup(cleanup)
	t.Logf("network: bridge at %s, nodes %v in namespaces %v", nw.hostIP, nw.nodeIP, nw.nodeNS)
	return nw
}

// loopback is the network of processes that all live on loopback.
func loopback(nodes []string) *network {
	lo := &network{hostIP: "127.0.0.1", nodeIP: map[string]string{}, nodeNS: map[string]string{}}
	for _, n := range nodes {
		lo.nodeIP[n] = "127.0.0.1"
		lo.nodeNS[n] = ""
	}
	return lo
}

func ipCmd(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// makeNamespaces builds the bridge and the namespaces. cleanup undoes what was done,
// also after an error.
func makeNamespaces(nodes []string) (nw *network, cleanup func(), err error) {
	var undo []func()
	cleanup = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	out, err := exec.Command("ip", "-o", "-4", "addr").Output()
	if err != nil {
		return nil, cleanup, fmt.Errorf("ip addr: %w", err)
	}
	x := 0
	for range 50 {
		c := 1 + mrand.IntN(254)
		if !strings.Contains(string(out), fmt.Sprintf(" 10.213.%d.", c)) {
			x = c
			break
		}
	}
	if x == 0 {
		return nil, cleanup, errors.New("no free 10.213.X.0/24")
	}
	suffix := fmt.Sprintf("%04x", mrand.IntN(1<<16))
	bridge := "fmbr" + suffix
	nw = &network{hostIP: fmt.Sprintf("10.213.%d.1", x), nodeIP: map[string]string{}, nodeNS: map[string]string{}, netns: true}
	if err := ipCmd("link", "add", bridge, "type", "bridge"); err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { ipCmd("link", "del", bridge) })
	for _, args := range [][]string{
		{"addr", "add", nw.hostIP + "/24", "dev", bridge},
		{"link", "set", bridge, "up"},
	} {
		if err := ipCmd(args...); err != nil {
			return nil, cleanup, err
		}
	}
	for k, name := range nodes {
		ns := fmt.Sprintf("fmns%s-%d", suffix, k+1)
		if err := ipCmd("netns", "add", ns); err != nil {
			return nil, cleanup, err
		}
		undo = append(undo, func() { ipCmd("netns", "del", ns) })
		host, peer := fmt.Sprintf("fmv%s%d", suffix, k+1), fmt.Sprintf("fmp%s%d", suffix, k+1)
		addr := fmt.Sprintf("10.213.%d.%d", x, 11+k)
		if err := ipCmd("link", "add", host, "type", "veth", "peer", "name", peer); err != nil {
			return nil, cleanup, err
		}
		undo = append(undo, func() { ipCmd("link", "del", host) }) // gone with the netns already, usually
		for _, args := range [][]string{
			{"link", "set", host, "master", bridge},
			{"link", "set", host, "up"},
			{"link", "set", peer, "netns", ns},
			{"-n", ns, "addr", "add", addr + "/24", "dev", peer},
			{"-n", ns, "link", "set", peer, "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := ipCmd(args...); err != nil {
				return nil, cleanup, err
			}
		}
		nw.nodeIP[name] = addr
		nw.nodeNS[name] = ns
	}
	return nw, cleanup, nil
}

// handedOut holds every port freePorts returned: a port picked for a process that
// has not bound it yet must not be picked again.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePorts returns n distinct ports free for TCP and UDP on host (gossip uses
// both; the others only need TCP), never one it returned before. The listeners
// are held until all are picked.
//
// The ports are below the kernel's ephemeral range: a process the test
// restarts (a NATS server after its kill -9) binds its port again, and a port
// the kernel hands out meanwhile (any test's outgoing connection, any ":0"
// listener) would be taken ("bind: address already in use").
func freePorts(t *testing.T, host string, n int) []int {
	t.Helper()
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	lo, hi := fixedPortRange()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 10000 {
			t.Fatalf("no free port on %s in [%d, %d)", host, lo, hi)
		}
		ln, err := net.Listen("tcp4", net.JoinHostPort(host, strconv.Itoa(lo+mrand.IntN(hi-lo))))
		if err != nil {
			continue // taken: try another
		}
		closers = append(closers, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		handedOut.Lock()
		used := handedOut.ports[port]
		handedOut.Unlock()
		if used {
			continue
		}
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			continue // UDP taken: try another
		}
		closers = append(closers, pc)
		ports = append(ports, port)
	}
	handedOut.Lock()
	for _, p := range ports {
		handedOut.ports[p] = true
	}
	handedOut.Unlock()
	return ports
}

// fixedPortRange is where freePorts picks: from 10000 up to the start of the
// kernel's ephemeral range (ip_local_port_range), or above its end when it
// starts lower; at most 20000 ports.
func fixedPortRange() (lo, hi int) {
	elo, ehi := 32768, 60999 // Linux's default ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, errA := strconv.Atoi(f[0])
			b, errB := strconv.Atoi(f[1])
			if errA == nil && errB == nil {
				elo, ehi = a, b
			}
		}
	}
	switch {
	case elo-10000 >= 1000:
		lo, hi = 10000, elo
	case 65536-(ehi+1) >= 1000:
		lo, hi = ehi+1, 65536
	default: // no room outside: anywhere above the well-known ports
		lo, hi = 10000, 65536
	}
	return lo, min(hi, lo+20000)
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// apiClient talks to one controller's HTTP API with plain net/http.
type apiClient struct {
	f     *fleet
	base  string // http://127.0.0.1:PORT
	token string // the API token it sends; "" is the controllers' bootstrap token
}

// reply is one HTTP reply, read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
}

// apiErr decodes the JSON error of a reply (nil when there is none).
func (r reply) apiErr() *api.Error {
	var e api.ErrorReply
	if json.Unmarshal(r.body, &e) != nil {
		return nil
	}
	return e.Error
}

func (r reply) String() string {
	return fmt.Sprintf("HTTP %d: %s", r.status, bytes.TrimSpace(r.body))
}

// send sends a request; body is JSON-encoded unless it is a string or []byte,
// which are sent as they are (with a JSON content type). It does not touch the
// test, so goroutines may use it.
func (c *apiClient) send(ctx context.Context, method, path string, body any) (reply, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return reply{}, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return reply{}, err
	}
	token := c.token
	if token == "" {
		token = fleetToken
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := c.f.hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data, took: time.Since(start)}, nil
}

// do sends a request (at most 60 s) and fails the test when it cannot be made.
func (c *apiClient) do(method, path string, body any) reply {
	c.f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.send(ctx, method, path, body)
	if err != nil {
		c.f.t.Fatalf("%s %s%s: %v", method, c.base, path, err)
	}
	return r
}

// call sends a request, requires status want and decodes the JSON reply into out
// (nil: ignore it).
func (c *apiClient) call(method, path string, body any, want int, out any) reply {
	c.f.t.Helper()
	r := c.do(method, path, body)
	if r.status != want {
		c.f.t.Fatalf("%s %s: want HTTP %d, got %s", method, path, want, r)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			c.f.t.Fatalf("%s %s: decode %T: %v\n%s", method, path, out, err, r.body)
		}
	}
	return r
}

// nodes returns GET /v1/nodes, or nil when the controller does not answer.
func (c *apiClient) nodes() map[string]api.Node {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.send(ctx, http.MethodGet, "/v1/nodes", nil)
	if err != nil || r.status != http.StatusOK {
		return nil
	}
	var l api.NodeList
	if json.Unmarshal(r.body, &l) != nil {
		return nil
	}
	out := map[string]api.Node{}
	for _, n := range l.Nodes {
		out[n.Name] = n
	}
	return out
}

// serves reports whether the node answers a request routed through the controller
// (GET /v1/sessions?node=).
func (c *apiClient) serves(node string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.send(ctx, http.MethodGet, "/v1/sessions?node="+node, nil)
	return err == nil && r.status == http.StatusOK
}

// healthy reports whether GET /healthz answers 200.
func (c *apiClient) healthy() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := c.send(ctx, http.MethodGet, "/healthz", nil)
	return err == nil && r.status == http.StatusOK
}

// rawOutput reads a session's whole output from offset 0 (GET .../output without
// follow, as many times as it takes to reach Fleetmux-End).
func (c *apiClient) rawOutput(node, id string) []byte {
	c.f.t.Helper()
	var out []byte
	for {
		r := c.call(http.MethodGet, fmt.Sprintf("/v1/sessions/%s/%s/output?from=%d", node, id, len(out)), nil, http.StatusOK, nil)
		if got := r.header.Get(api.HeaderOffset); got != strconv.Itoa(len(out)) {
			c.f.t.Fatalf("output from %d: %s header %q", len(out), api.HeaderOffset, got)
		}
		end, err := strconv.ParseInt(r.header.Get(api.HeaderEnd), 10, 64)
		if err != nil {
			c.f.t.Fatalf("output: %s header %q", api.HeaderEnd, r.header.Get(api.HeaderEnd))
		}
		out = append(out, r.body...)
		if int64(len(out)) >= end || len(r.body) == 0 {
			return out
		}
	}
}

// follower reads GET .../output?follow=1 into a buffer on a goroutine of its own.
type follower struct {
	buf    *testutil.Buffer
	resp   *http.Response
	cancel context.CancelFunc
	done   chan struct{}
	err    error // why reading ended, after done
}

// follow starts following a session's output from offset from; the bytes go to buf.
func (c *apiClient) follow(node, id string, from int, buf *testutil.Buffer) *follower {
	c.f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/sessions/%s/%s/output?from=%d&follow=1", c.base, node, id, from), nil)
	if err == nil {
		req.Header.Set("Authorization", "Bearer "+fleetToken)
	}
	if err != nil {
		cancel()
		c.f.t.Fatal(err)
	}
	resp, err := c.f.hc.Do(req)
	if err != nil {
		cancel()
		c.f.t.Fatalf("follow %s/%s from %d: %v", node, id, from, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		c.f.t.Fatalf("follow %s/%s from %d: HTTP %d: %s", node, id, from, resp.StatusCode, body)
	}
	fl := &follower{buf: buf, resp: resp, cancel: cancel, done: make(chan struct{})}
	go func() { // owned by fl: ends when the body ends or is cancelled
		defer close(fl.done)
		defer resp.Body.Close()
		p := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(p)
			buf.Write(p[:n])
			if err != nil {
				fl.err = err
				return
			}
		}
	}()
	c.f.t.Cleanup(fl.stop)
	return fl
}

// stop cancels the stream and waits for its reader.
func (fl *follower) stop() {
	fl.cancel()
	<-fl.done
}

// latencyProxy forwards TCP connections from a loopback port to target, delivering
// every chunk delay after it was read, in each direction: a link with latency.
type latencyProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startLatencyProxy(t *testing.T, target string, delay time.Duration) *latencyProxy {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &latencyProxy{ln: ln, target: target, delay: delay}
	p.wg.Add(1)
	go p.accept() // owned by p: ends with close
	t.Cleanup(p.close)
	return p
}

func (p *latencyProxy) addr() string { return p.ln.Addr().String() }

func (p *latencyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.wg.Add(4)
		p.mu.Unlock()
		go p.pipe(c, s) // owned by p: end when either side closes
		go p.pipe(s, c)
	}
}

// pipe copies src to dst with the delay; when either ends, both are closed.
func (p *latencyProxy) pipe(src, dst net.Conn) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	ch := make(chan chunk, 4096)
	go func() { // the writer; owned by pipe: ends when ch is closed
		defer p.wg.Done()
		failed := false
		for c := range ch {
			if failed {
				continue // drain: the reader must not block
			}
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d) // the link's latency (not synchronisation)
			}
			if _, err := dst.Write(c.b); err != nil {
				failed = true
			}
		}
		dst.Close()
		src.Close()
	}()
	defer p.wg.Done()
	defer close(ch)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{at: time.Now().Add(p.delay), b: bytes.Clone(buf[:n])}
		}
		if err != nil {
			return
		}
	}
}

func (p *latencyProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

// inFlight is a request sent on a goroutine of its own (at most 60 s).
type inFlight struct {
	res    chan inFlightResult
	cancel context.CancelFunc
}

type inFlightResult struct {
	r   reply
	err error
	at  time.Time // when it returned
}

// start sends a request and returns at once; failsFast waits for its reply.
func (c *apiClient) start(method, path string, body any) *inFlight {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	q := &inFlight{res: make(chan inFlightResult, 1), cancel: cancel}
	go func() { // ends with the request (at most 60 s)
		r, err := c.send(ctx, method, path, body)
		q.res <- inFlightResult{r, err, time.Now()}
	}()
	return q
}

// failsFast checks that the request, in flight when its node was killed at
// killed, failed with unavailable within a second (what issue 18 asks); what it
// names is for the messages.
func (q *inFlight) failsFast(t *testing.T, what string, killed time.Time) {
	t.Helper()
	defer q.cancel()
	var got inFlightResult
	select {
	case got = <-q.res:
	case <-time.After(15 * time.Second):
		t.Fatalf("the in-flight %s did not return within 15s of kill -9", what)
	}
	took := got.at.Sub(killed)
	t.Logf("the in-flight %s failed %v after kill -9: %s", what, took.Round(time.Millisecond), got.r)
	if e := got.r.apiErr(); got.err != nil || got.r.status != http.StatusServiceUnavailable || e == nil || e.Code != api.CodeUnavailable {
		t.Fatalf("the in-flight %s after kill -9: %s (%v), want 503 unavailable", what, got.r, got.err)
	}
	if took > time.Second {
		t.Errorf("the in-flight %s failed %v after kill -9, want within 1s", what, took)
	}
}
