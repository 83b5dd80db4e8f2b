package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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

// runClientTests starts `fleetmux dev` and a cutting proxy in front of its HTTP API,
// and runs a client's test suite against the proxy: FLEETMUX_ADDR and
// FLEETMUX_TOKEN name it, and a GET of FLEETMUX_TEST_CUT cuts every connection
// through it, as a controller restart does (the follow tests resume across it).
func runClientTests(t *testing.T, dir, prog string, args ...string) {
	t.Setenv("HOME", t.TempDir()) // the sessions' shells must not read the tester's rc files
	addr := startDev(t)
	u, err := url.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	p := startCutProxy(t, u.Host)
	cut := httpOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.cut() }))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FLEETMUX_ADDR=http://"+p.addr, "FLEETMUX_TOKEN="+devAdminToken,
		"FLEETMUX_TEST_CUT="+cut+"/cut", "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s %v:\n%s", filepath.Base(prog), args, out)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(prog), err)
	}
	if p.cuts() == 0 {
		t.Errorf("the suite never cut the connections: its follow test did not run")
	}
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

// cutProxy forwards TCP connections to a target; cut closes every open one.
type cutProxy struct {
	addr   string
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu    sync.Mutex // guards conns, ncuts
	conns map[net.Conn]bool
	ncuts int
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve() // ends when ln closes (cleanup)
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) { // owned by serve: ends when either side closes
			defer p.wg.Done()
			io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// cut closes every connection through the proxy.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.ncuts++
}

func (p *cutProxy) cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ncuts
}
