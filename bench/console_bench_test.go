package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/fleetmux/fleetmux/api"
)

// The web console's benchmarks, on the controller stack of controller_bench_test.go
// (embedded NATS, a node agent with real bash sessions, the controller's HTTP API on
// loopback serving the console) and real HTTP and WebSocket clients:
//
//   - page: time to the first byte of a console page (GET /ui/, its index.html) and of
//     its largest asset, over a kept-alive connection and over a fresh one each.
//   - first byte: from dialling a session's attach WebSocket (the console's terminal)
//     or its /live stream (v3.asciicast, the players') to the first byte of the screen.
//   - echo: a keystroke sent on the attach WebSocket until its echo comes back on it
//     (a printable key, then DEL, so the line never grows).
//   - viewers: a command printing consoleTPBytes, alone and with consoleViewers attach
//     WebSockets reading the session, alternating in one run; the ratio of the
//     throughputs.
//
// TestConsoleBenchReport (FLEETMUX_BENCH_REPORT=1) prints the tables of README.md;
// TestConsoleDrivers (always) runs each once.

const (
	consoleViewers = 20
	// consoleTPBytes is what the viewers' command prints (81-byte lines).
	consoleTPBytes = 8_000_000
)

// consoleTPCmd prints consoleTPBytes of 81-byte lines, then consoleTPEnd.
var consoleTPCmd = "yes " + strings.Repeat("x", 80) + " | head -c " + fmt.Sprint(consoleTPBytes) + "; echo END-$((6*7))"

// consoleTPEnd is the last line consoleTPCmd prints: a viewer that shows it saw the
// command's end (its bytes, or a redraw of the screen).
const consoleTPEnd = "END-42"

// wsURL is the WebSocket URL of a session route (addr NODE/ID, route attach or live).
func (s *ctlStack) wsURL(addr, route string) string {
	return "ws" + strings.TrimPrefix(s.base, "http") + "/v1/sessions/" + addr + "/" + route
}

// dialWS opens a WebSocket to a session route with the stack's token, offering
// protocols.
func (s *ctlStack) dialWS(ctx context.Context, addr, route string, protocols ...string) (*websocket.Conn, error) {
	h := http.Header{"Authorization": {"Bearer " + benchToken}}
	ws, _, err := websocket.Dial(ctx, s.wsURL(addr, route), &websocket.DialOptions{HTTPHeader: h, Subprotocols: protocols})
	if err != nil {
		return nil, fmt.Errorf("dial %s of %s: %w", route, addr, err)
	}
	ws.SetReadLimit(16 << 20)
	return ws, nil
}

// pageTTFB fetches url with client and returns the time from sending the request to
// the reply's first byte; the body is read to its end and checked to be want bytes.
func pageTTFB(client *http.Client, url string, want int) (time.Duration, error) {
	var t0, first time.Time
	trace := &httptrace.ClientTrace{
		WroteRequest:         func(httptrace.WroteRequestInfo) { t0 = time.Now() },
		GotFirstResponseByte: func() { first = time.Now() },
	}
	start := time.Now()
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK || want > 0 && int(n) != want {
		return 0, fmt.Errorf("GET %s: %s, %d bytes", url, resp.Status, n)
	}
	if t0.IsZero() { // a fresh connection: count the dial too
		t0 = start
	}
	return first.Sub(t0), nil
}

// freshTTFB is pageTTFB on a new connection (dial included).
func freshTTFB(url string, want int) (time.Duration, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	var first time.Time
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Now() }}
	t0 := time.Now()
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || want > 0 && int(n) != want {
		return 0, fmt.Errorf("GET %s: %v, %d bytes, %v", url, resp.Status, n, err)
	}
	return first.Sub(t0), nil
}

// firstByte dials a session's attach (route "attach") or /live (route "live", as
// v3.asciicast) and returns the time from the dial to the first byte of the screen:
// attach's first binary frame, or the live stream's first "o" event (after its
// header).
func (s *ctlStack) firstByte(addr, route string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	t0 := time.Now()
	var protos []string
	if route == "live" {
		protos = []string{"v3.asciicast"}
	}
	ws, err := s.dialWS(ctx, addr, route, protos...)
	if err != nil {
		return 0, err
	}
	defer ws.CloseNow()
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return 0, fmt.Errorf("%s of %s: %w", route, addr, err)
		}
		if route == "attach" && typ == websocket.MessageBinary && len(data) > 0 ||
			route == "live" && bytes.Contains(data, []byte(`, "o", `)) {
			return time.Since(t0), nil
		}
	}
}

// echoer types into a session over an attach WebSocket and times each key's echo.
type echoer struct {
	ws   *websocket.Conn
	ctx  context.Context
	stop context.CancelFunc
	got  chan []byte // the attach's output frames
	done chan struct{}
	n    int
}

func (s *ctlStack) startEchoer(addr string) (*echoer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ws, err := s.dialWS(ctx, addr, "attach")
	if err != nil {
		cancel()
		return nil, err
	}
	e := &echoer{ws: ws, ctx: ctx, stop: cancel, got: make(chan []byte, 1024), done: make(chan struct{})}
	go func() { // the reader; Close waits for it
		defer close(e.done)
		for {
			typ, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				select {
				case e.got <- data:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	// The screen first: wait until it came and the line is quiet (drain what comes
	// within 200 ms of the last frame).
	if err := e.drain(2*time.Second, 200*time.Millisecond); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// drain takes output frames until none came for quiet (after the first, within wait).
func (e *echoer) drain(wait, quiet time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-e.got:
			t.Reset(quiet)
		case <-t.C:
			return nil
		case <-e.done:
			return errors.New("the attach closed")
		}
	}
}

// key sends one keystroke and returns the time until its echo: a printable key's
// own byte, DEL's backspace (bash erases with "\b").
func (e *echoer) key() (time.Duration, error) {
	e.n++
	k, want := []byte{'a' + byte(e.n/2%26)}, byte(0)
	want = k[0]
	if e.n%2 == 0 {
		k, want = []byte{0x7f}, '\b'
	}
	ctx, cancel := context.WithTimeout(e.ctx, opTimeout)
	defer cancel()
	t0 := time.Now()
	if err := e.ws.Write(ctx, websocket.MessageBinary, k); err != nil {
		return 0, err
	}
	for {
		select {
		case data := <-e.got:
			if bytes.IndexByte(data, want) >= 0 {
				return time.Since(t0), nil
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("no echo of %q: %w", k, ctx.Err())
		case <-e.done:
			return 0, errors.New("the attach closed")
		}
	}
}

func (e *echoer) Close() {
	e.stop()
	e.ws.CloseNow()
	<-e.done
}

// viewer is an attach WebSocket that reads a session's output as fast as it comes
// and counts it.
type viewer struct {
	ws     *websocket.Conn
	bytes  atomic.Int64
	sawEnd atomic.Bool            // want came (set by the reader, cleared by viewedRun)
	want   atomic.Pointer[string] // what sawEnd waits for
	err    error                  // why it stopped (after Close: nil or the context's)
	done   chan struct{}
	stop   context.CancelFunc
}

func (s *ctlStack) startViewers(addr string, n int) ([]*viewer, error) {
	var vs []*viewer
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		ws, err := s.dialWS(ctx, addr, "attach")
		if err != nil {
			cancel()
			closeViewers(vs)
			return nil, err
		}
		v := &viewer{ws: ws, done: make(chan struct{}), stop: cancel}
		end := consoleTPEnd
		v.want.Store(&end)
		go func() { // closeViewers waits for it
			defer close(v.done)
			// A viewer's reads cost what a browser's would, no more: no
			// allocation per message.
			var tail endWatch
			buf := make([]byte, 64<<10)
			for {
				typ, r, err := ws.Reader(ctx)
				var n int64
				if err == nil {
					tail.saw, tail.want = &v.sawEnd, *v.want.Load()
					n, err = io.CopyBuffer(&tail, struct{ io.Reader }{r}, buf)
				}
				if err != nil {
					if ctx.Err() == nil {
						v.err = err
					}
					return
				}
				if typ == websocket.MessageBinary {
					v.bytes.Add(n)
				}
			}
		}()
		vs = append(vs, v)
	}
	return vs, nil
}

func closeViewers(vs []*viewer) error {
	var errs []error
	for _, v := range vs {
		v.stop()
		v.ws.CloseNow()
		<-v.done
		errs = append(errs, v.err)
	}
	return errors.Join(errs...)
}

// endWatch sets saw when want goes through it (also across writes).
type endWatch struct {
	last []byte
	want string
	saw  *atomic.Bool
}

func (w *endWatch) Write(p []byte) (int, error) {
	if bytes.Contains(append(w.last, p[:min(len(p), len(w.want))]...), []byte(w.want)) || bytes.Contains(p, []byte(w.want)) {
		w.saw.Store(true)
	}
	w.last = append(w.last[:0], p[max(0, len(p)-len(w.want)):]...)
	return len(p), nil
}

// tpRun runs consoleTPCmd in the session at addr and returns the time from
// submission to the block's end (all of its output read by the node).
func (s *ctlStack) tpRun(addr string) (time.Duration, error) {
	t0 := time.Now()
	var r api.BlockResult
	if err := s.do("POST", "/v1/sessions/"+addr+"/run", api.RunBody{Command: consoleTPCmd, TimeoutMS: int(throughputTimeout / time.Millisecond), MaxOutputBytes: 1024}, &r); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	if r.Block.ExitCode == nil || *r.Block.ExitCode != 0 {
		return 0, fmt.Errorf("throughput run: block %d exit %v", r.Block.N, r.Block.ExitCode)
	}
	return d, nil
}

// viewedRun is tpRun with n viewers attached for the run (opened before, closed
// after, outside the time); it returns the least output any viewer received (all
// of it, or what a view that fell behind got: its redraws and the bytes after
// them). Each viewer must come to see the command's last line.
func (s *ctlStack) viewedRun(addr string, n int) (time.Duration, int64, error) {
	vs, err := s.startViewers(addr, n)
	if err != nil {
		return 0, 0, err
	}
	// Every viewer follows the session before the run starts: each sees a
	// warm-up command's output.
	warm := "WARM-42"
	for _, v := range vs {
		v.want.Store(&warm)
	}
	if err := s.do("POST", "/v1/sessions/"+addr+"/run", api.RunBody{Command: "echo WARM-$((6*7))", TimeoutMS: int(opTimeout / time.Millisecond)}, nil); err != nil {
		closeViewers(vs)
		return 0, 0, err
	}
	deadline := time.Now().Add(opTimeout)
	for i, v := range vs {
		for !v.sawEnd.Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !v.sawEnd.Load() {
			closeViewers(vs)
			return 0, 0, fmt.Errorf("viewer %d did not see the warm-up command", i)
		}
	}
	end := consoleTPEnd
	start := make([]int64, len(vs))
	for i, v := range vs {
		v.want.Store(&end)
		start[i] = v.bytes.Load()
		v.sawEnd.Store(false)
	}
	d, err := s.tpRun(addr)
	least := int64(-1)
	if err == nil {
		deadline = time.Now().Add(opTimeout)
		for i, v := range vs {
			for !v.sawEnd.Load() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if !v.sawEnd.Load() {
				err = fmt.Errorf("viewer %d did not see the command's end (%d bytes)", i, v.bytes.Load()-start[i])
			}
			if got := v.bytes.Load() - start[i]; least < 0 || got < least {
				least = got
			}
		}
	}
	if cerr := closeViewers(vs); err == nil {
		err = cerr
	}
	return d, least, err
}

// ---- smoke test (runs in CI) ----

func TestConsoleDrivers(t *testing.T) {
	s := startCtlStack(t, newBenchEnv(t), 1)
	s.startAPISession(t)
	addr, err := s.newSession("n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.apiRun(addr); err != nil {
		t.Fatal(err)
	}
	if _, err := pageTTFB(s.http, s.base+"/ui/", 0); err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{"attach", "live"} {
		if _, err := s.firstByte(addr, route); err != nil {
			t.Fatal(err)
		}
	}
	e, err := s.startEchoer(addr)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := e.key(); err != nil {
			t.Fatal(err)
		}
	}
	e.Close()
	if _, _, err := s.viewedRun(addr, 2); err != nil {
		t.Fatal(err)
	}
}

// ---- report ----

// TestConsoleBenchReport (only with FLEETMUX_BENCH_REPORT=1) measures the console's
// page TTFB, first terminal byte, keystroke echo and the throughput of a session
// with and without 20 viewers, each variant interleaved, and prints README.md's
// tables.
func TestConsoleBenchReport(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the console benchmark report (about a minute)")
	}
	rounds := envInt(t, "FLEETMUX_BENCH_ROUNDS", 300)
	tpRuns := envInt(t, "FLEETMUX_BENCH_TP_RUNS", 5)
	load := loadAverage()
	s := startCtlStack(t, newBenchEnv(t), 1)
	addr, err := s.newSession("n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.apiRun(addr); err != nil {
		t.Fatal(err)
	}

	// The largest console asset (xterm.js).
	big, bigLen := "", 0
	for _, p := range []string{"/ui/vendor/xterm/xterm.mjs", "/ui/app.js"} {
		resp, err := s.http.Get(s.base + p)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			big, bigLen = p, int(n)
			break
		}
	}
	type variant struct {
		name, what string
		op         func() (time.Duration, error)
		ds         []time.Duration
		every      int
	}
	vs := []*variant{
		{name: "page /ui/", what: "GET /ui/ (index.html) on a kept-alive connection: request written → first byte", op: func() (time.Duration, error) { return pageTTFB(s.http, s.base+"/ui/", 0) }},
		{name: "page /ui/ fresh", what: "the same on a new TCP connection each (dial included)", op: func() (time.Duration, error) { return freshTTFB(s.base+"/ui/", 0) }},
		{name: "asset " + big, what: fmt.Sprintf("the largest asset (%d KiB), kept-alive", bigLen>>10), op: func() (time.Duration, error) { return pageTTFB(s.http, s.base+big, bigLen) }},
		{name: "attach first byte", what: "dial the attach WebSocket → first byte of the screen (the console's terminal)", op: func() (time.Duration, error) { return s.firstByte(addr, "attach") }, every: 3},
		{name: "live first byte", what: "dial /live (v3.asciicast) → the screen's first \"o\" event (players)", op: func() (time.Duration, error) { return s.firstByte(addr, "live") }, every: 3},
	}
	const warmup = 10
	gap := time.Duration(envInt(t, "FLEETMUX_BENCH_GAP_MS", 5)) * time.Millisecond
	for i := range warmup + rounds {
		for j := range vs {
			v := vs[(i+j)%len(vs)]
			if v.every > 1 && i%v.every != 0 {
				continue
			}
			time.Sleep(gap)
			d, err := v.op()
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			if i >= warmup {
				v.ds = append(v.ds, d)
			}
		}
	}

	// Keystroke echo: one attach typing, a key every gap.
	e, err := s.startEchoer(addr)
	if err != nil {
		t.Fatal(err)
	}
	var echo []time.Duration
	for i := range warmup + rounds {
		time.Sleep(gap)
		d, err := e.key()
		if err != nil {
			t.Fatal(err)
		}
		if i >= warmup {
			echo = append(echo, d)
		}
	}
	e.Close()
	vs = append(vs, &variant{name: "keystroke echo", what: "a key on the attach WebSocket → its echo on it (bash readline; a letter, then DEL)", ds: echo})

	// Throughput alone and with viewers, alternating.
	loadTP := loadAverage()
	if _, err := s.tpRun(addr); err != nil { // warm-up
		t.Fatal(err)
	}
	var alone, viewed []time.Duration
	var least []int64
	for i := range 2 * tpRuns {
		if i%2 == 0 {
			d, err := s.tpRun(addr)
			if err != nil {
				t.Fatal(err)
			}
			alone = append(alone, d)
			continue
		}
		d, got, err := s.viewedRun(addr, consoleViewers)
		if err != nil {
			t.Fatal(err)
		}
		viewed, least = append(viewed, d), append(least, got)
	}

	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, %d CPUs (nproc), %s %s/%s, %s; %d interleaved rounds after %d warm-ups (first byte: one round in 3), %v idle before each (load average before: %s)\n\n",
		time.Now().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, toolVersion("bash", "--version"), rounds, warmup, gap, load)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintf(&out, "| what | runs | p50 | p95 | p99 | max | measures |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, v := range vs {
		fmt.Fprintf(&out, "| %s | %d | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %s |\n", v.name, len(v.ds),
			ms(percentile(v.ds, 50)), ms(percentile(v.ds, 95)), ms(percentile(v.ds, 99)), ms(slices.Max(v.ds)), v.what)
	}
	mbps := func(d time.Duration) float64 { return consoleTPBytes / d.Seconds() / 1e6 }
	fmt.Fprintf(&out, "\n`%s…` (%d MB), %d runs each, alone and with %d attach viewers alternating (load average before: %s):\n\n",
		consoleTPCmd[:12], consoleTPBytes/1_000_000, tpRuns, consoleViewers, loadTP)
	fmt.Fprintf(&out, "| | p50 | min | max | MB/s (p50) |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(&out, "| alone | %.0f ms | %.0f ms | %.0f ms | %.1f |\n", ms(percentile(alone, 50)), ms(slices.Min(alone)), ms(slices.Max(alone)), mbps(percentile(alone, 50)))
	fmt.Fprintf(&out, "| %d viewers | %.0f ms | %.0f ms | %.0f ms | %.1f |\n", consoleViewers, ms(percentile(viewed, 50)), ms(slices.Min(viewed)), ms(slices.Max(viewed)), mbps(percentile(viewed, 50)))
	fmt.Fprintf(&out, "\nthroughput with %d viewers / alone (p50): %.2f×; the viewer that received least in each run got %v bytes (the command prints %d, plus the terminal's \\r; a view more than 256 KiB behind gets the screen instead)\n",
		consoleViewers, float64(percentile(alone, 50))/float64(percentile(viewed, 50)), least, consoleTPBytes)
	fmt.Print(out.String())
}

// BenchmarkConsoleViewers: consoleTPCmd in a session, alone and with consoleViewers
// attach viewers (per run; MB/s of the command's output).
func BenchmarkConsoleViewers(b *testing.B) {
	for _, n := range []int{0, consoleViewers} {
		b.Run(fmt.Sprintf("viewers=%d", n), func(b *testing.B) {
			s := startCtlStack(b, newBenchEnv(b), 1)
			addr, err := s.newSession("n1")
			if err != nil {
				b.Fatal(err)
			}
			if err := s.apiRun(addr); err != nil {
				b.Fatal(err)
			}
			var ds []time.Duration
			for b.Loop() {
				d, _, err := s.viewedRun(addr, n)
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, d)
			}
			b.ReportMetric(consoleTPBytes/percentile(ds, 50).Seconds()/1e6, "MB/s")
		})
	}
}
