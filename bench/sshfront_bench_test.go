package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// The SSH front door, next to what people use without fleetmux. `fleetmux dev` runs
// as its own process (the real binary: the CLI verbs behind `ssh controller VERB`
// are the real CLI), and the real OpenSSH client talks to it:
//
//   - keystroke echo: one byte typed into `stty -icanon -echo; cat` and read back,
//     through `ssh -tt NODE+ID@controller` (OpenSSH client → fleetmux's SSH server →
//     the node's input verb over NATS → PTY → cat → the output stream over NATS →
//     the SSH channel), through a raw PTY, and through OpenSSH's own sshd;
//   - `ssh controller run NODE/ID -- true` (the command's exit code comes back as
//     ssh's) vs `ssh host true`, over fresh connections and over a ControlMaster.

// devNode is the node name of the benchmarks' `fleetmux dev`.
const devNode = "bench"

// devProc is `fleetmux dev` as a process of its own on free loopback ports, with
// an authorized_keys file holding one key (an admin: it is dev).
type devProc struct {
	cmd   *exec.Cmd
	out   *testutil.Buffer
	api   *ctlStack  // the HTTP API (only base and http are set)
	front *sshDriver // OpenSSH client options for the SSH front door (no sshd)
}

var (
	devUpRe   = regexp.MustCompile(`HTTP API\s+(http://127\.0\.0\.1:\d+)`)
	devSSHRe  = regexp.MustCompile(`ssh -p (\d+) 127\.0\.0\.1`)
	errNoSSHC = errors.New("OpenSSH client not usable")
)

// startDevProc builds and starts `fleetmux dev`. A missing ssh or ssh-keygen
// returns an error wrapping errNoSSHC.
func startDevProc(tb testing.TB, e benchEnv) (*devProc, error) {
	tb.Helper()
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		return nil, fmt.Errorf("%w: ssh not installed", errNoSSHC)
	}
	keygen, err := exec.LookPath("ssh-keygen")
	if err != nil {
		return nil, fmt.Errorf("%w: ssh-keygen not installed", errNoSSHC)
	}
	dir := tb.TempDir()
	bin, err := testutil.BuildFleetmux(dir)
	if err != nil {
		return nil, err
	}
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "fmbench", "-f", key).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: ssh-keygen: %v: %s", errNoSSHC, err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		return nil, err
	}
	ak := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(ak, pub, 0o600); err != nil {
		return nil, err
	}
	d := &devProc{out: &testutil.Buffer{Tail: 4 << 10}}
	d.cmd = exec.Command(bin, "dev", "--data", filepath.Join(dir, "data"), "--name", devNode,
		"--http-listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--gossip-listen", "127.0.0.1:0",
		"--ssh-listen", "127.0.0.1:0", "--authorized-keys", ak, "--holder=false") // a holder would outlive the test
	d.cmd.Dir, d.cmd.Env = e.dir, slices.Clone(e.base)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	tb.Cleanup(d.stop)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(d.out.String(), "fleetmux dev is up") {
		if time.Now().After(deadline) || d.cmd.ProcessState != nil {
			return nil, fmt.Errorf("fleetmux dev did not come up: %s", d.out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	up := d.out.String()
	m, s := devUpRe.FindStringSubmatch(up), devSSHRe.FindStringSubmatch(up)
	if m == nil || s == nil {
		return nil, fmt.Errorf("fleetmux dev printed no HTTP or SSH address: %s", up)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute}
	tb.Cleanup(tr.CloseIdleConnections)
	tok, err := os.ReadFile(filepath.Join(dir, "data", "token"))
	if err != nil {
		return nil, fmt.Errorf("fleetmux dev's admin token: %w", err)
	}
	d.api = &ctlStack{base: m[1], http: &http.Client{Transport: tr, Timeout: time.Minute}, dir: e.dir, token: strings.TrimSpace(string(tok))}
	d.front = &sshDriver{bin: sshBin, dir: dir, env: slices.Clone(e.base), log: d.out, args: []string{
		"-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-i", key, "-p", s[1], "127.0.0.1",
	}}
	return d, nil
}

// stop ends dev with SIGINT (it closes its sessions) and reaps it; SIGKILL after 10 s.
func (d *devProc) stop() {
	if d.front != nil && d.front.master != nil {
		_ = d.front.master.Process.Kill()
		_ = d.front.master.Wait()
		d.front.master = nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { // joined below
		_ = d.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// catSession creates a session that runs `stty -icanon -echo; cat` (every byte
// typed is read at once and written back) and returns its id once cat waits for
// input.
func (d *devProc) catSession() (string, error) {
	addr, err := d.api.newSession(devNode)
	if err != nil {
		return "", err
	}
	var br api.BlockResult
	if err := d.api.do("POST", "/v1/sessions/"+addr+"/run", api.RunBody{Command: echoCmd, TimeoutMS: 100}, &br); err != nil {
		return "", err
	}
	var wr api.WaitResult
	if err := d.api.do("GET", "/v1/sessions/"+addr+"/wait?until=waiting_input&timeout_ms=10000", nil, &wr); err != nil {
		return "", err
	}
	if !wr.OK {
		return "", fmt.Errorf("%s: cat does not wait for input: %+v", addr, wr.Session)
	}
	_, id, err := api.ParseAddress(addr)
	return id, err
}

// echoCmd echoes each byte typed as it comes: no line discipline, no echo of
// its own (cat writes what it reads).
const echoCmd = "stty -icanon -echo; cat"

// ---- echo drivers: type one byte, read it back ----

// rawEcho is cat in a raw PTY (bash started it).
type rawEcho struct {
	r *rawPTY
	n int
}

func startRawEcho(e benchEnv) (*rawEcho, error) {
	r, err := startRawPTY(e)
	if err != nil {
		return nil, err
	}
	x := &rawEcho{r: r}
	if err = r.type_(echoCmd + "\r"); err == nil {
		err = x.sync()
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return x, nil
}

// sync types Z (not in echoCmd) until it comes back: cat is running.
func (x *rawEcho) sync() error {
	deadline := time.Now().Add(opTimeout)
	for {
		if err := x.r.type_("Z"); err != nil {
			return err
		}
		_, err := x.r.readUntil([]byte("Z"), time.Now().Add(100*time.Millisecond))
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("raw pty: cat does not echo: %w", err)
		}
	}
}

func (x *rawEcho) key() error {
	c := string(rune('a' + x.n%10))
	x.n++
	if err := x.r.type_(c); err != nil {
		return err
	}
	_, err := x.r.readUntil([]byte(c), time.Now().Add(opTimeout))
	return err
}

func (x *rawEcho) Close() error { return x.r.Close() }

// pipeEcho is an OpenSSH client (`ssh -tt …`) whose remote end echoes: its stdin and
// stdout are pipes; a goroutine of its own reads stdout.
type pipeEcho struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  chan []byte // chunks of stdout; closed at EOF
	done chan struct{}
	buf  []byte
	n    int
	log  *testutil.Buffer
}

// startPipeEcho starts `ssh -tt ARGS...` and waits until it echoes.
func startPipeEcho(env []string, bin string, args ...string) (*pipeEcho, error) {
	return startPipeEchoSync("Z", env, bin, args...)
}

// startPipeEchoSync is startPipeEcho typing sync (ending in Z) until Z comes back.
func startPipeEchoSync(sync string, env []string, bin string, args ...string) (*pipeEcho, error) {
	x := &pipeEcho{out: make(chan []byte, 64), done: make(chan struct{}), log: &testutil.Buffer{Tail: 4 << 10}}
	x.cmd = exec.Command(bin, append([]string{"-tt"}, args...)...)
	x.cmd.Env = env
	x.cmd.Stderr = x.log
	x.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	if x.in, err = x.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := x.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := x.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { // owned by x: ends at EOF, which Close brings
		defer close(x.done)
		defer close(x.out)
		for {
			b := make([]byte, 4096)
			n, err := stdout.Read(b)
			if n > 0 {
				x.out <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	deadline := time.Now().Add(opTimeout)
	for {
		if _, err := x.in.Write([]byte(sync)); err != nil {
			x.Close()
			return nil, err
		}
		err := x.readUntil('Z', time.Now().Add(200*time.Millisecond))
		if err == nil {
			return x, nil
		}
		if time.Now().After(deadline) || errors.Is(err, io.EOF) {
			x.Close()
			return nil, fmt.Errorf("ssh -tt %v: no echo: %w (stderr: %s)", args, err, x.log.String())
		}
	}
}

// readUntil consumes stdout up to and including c.
func (x *pipeEcho) readUntil(c byte, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		if i := bytes.IndexByte(x.buf, c); i >= 0 {
			x.buf = append(x.buf[:0], x.buf[i+1:]...)
			return nil
		}
		x.buf = x.buf[:0]
		select {
		case b, ok := <-x.out:
			if !ok {
				return io.EOF
			}
			x.buf = append(x.buf, b...)
		case <-t.C:
			return fmt.Errorf("waiting for %q: timeout", c)
		}
	}
}

func (x *pipeEcho) key() error {
	c := byte('a' + x.n%10)
	x.n++
	if _, err := x.in.Write([]byte{c}); err != nil {
		return err
	}
	return x.readUntil(c, time.Now().Add(opTimeout))
}

// Close kills the client (the remote end sees the connection close) and waits for
// its reader.
func (x *pipeEcho) Close() error {
	_ = x.cmd.Process.Kill()
	_ = x.in.Close()
	for range x.out { // drain, so the reader never blocks on a full channel
	}
	<-x.done
	_ = x.cmd.Wait()
	return nil
}

// startAttachEcho attaches with `ssh -tt NODE+ID@…` to a session running cat.
func startAttachEcho(d *devProc) (*pipeEcho, error) {
	id, err := d.catSession()
	if err != nil {
		return nil, err
	}
	args := slices.Clone(d.front.args)
	args[len(args)-1] = devNode + "+" + id + "@127.0.0.1"
	// The API's run that started cat holds the session's writer lease until cat
	// ends: Ctrl-T takes it over once the attach's first Z was refused as busy.
	return startPipeEchoSync("\x14Z", d.front.env, d.front.bin, append([]string{"-o", "ControlPath=none"}, args...)...)
}

// startSSHDEcho runs cat under `ssh -tt host 'stty …; cat'` against OpenSSH's sshd.
func startSSHDEcho(s *sshDriver) (*pipeEcho, error) {
	return startPipeEcho(s.env, s.bin, append(append([]string{"-o", "ControlPath=none"}, s.args...), echoCmd)...)
}

// ---- benchmarks ----

// BenchmarkSSHEcho: one keystroke typed and its echo read back, per iteration.
func BenchmarkSSHEcho(b *testing.B) {
	b.Run("rawpty", func(b *testing.B) {
		x, err := startRawEcho(newBenchEnv(b))
		if err != nil {
			b.Fatal(err)
		}
		defer x.Close()
		benchLatency(b, x.key)
	})
	b.Run("attach", func(b *testing.B) {
		d, err := startDevProc(b, newBenchEnv(b))
		if errors.Is(err, errNoSSHC) {
			testutil.Missing(b, "%v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		x, err := startAttachEcho(d)
		if err != nil {
			b.Fatal(err)
		}
		defer x.Close()
		benchLatency(b, x.key)
	})
	b.Run("sshd", func(b *testing.B) {
		s, err := startSSH(newBenchEnv(b), b.TempDir())
		if errors.Is(err, errNoSSHD) {
			testutil.Missing(b, "%v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		x, err := startSSHDEcho(s)
		if err != nil {
			b.Fatal(err)
		}
		defer x.Close()
		benchLatency(b, x.key)
	})
}

// frontRun is `ssh -p PORT controller run NODE/ID -- true` with opts (fresh
// connection or ControlMaster); ssh's exit status is the command's.
func (d *devProc) frontRun(addr string, opts ...string) func() error {
	remote := []string{"run", addr, "--", "true"}
	return func() error { return d.front.runRemote(remote, opts...) }
}

// BenchmarkSSHRun: `ssh controller run NODE/ID -- true` next to `ssh host true`.
func BenchmarkSSHRun(b *testing.B) {
	front := func(b *testing.B, mux bool) {
		d, err := startDevProc(b, newBenchEnv(b))
		if errors.Is(err, errNoSSHC) {
			testutil.Missing(b, "%v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		addr, err := d.api.newSession(devNode)
		if err != nil {
			b.Fatal(err)
		}
		opts := []string{"-o", "ControlMaster=no", "-o", "ControlPath=none"}
		if mux {
			if err := d.front.startMaster(); err != nil {
				b.Fatal(err)
			}
			opts = []string{"-o", "ControlMaster=no", "-o", "ControlPath=" + d.front.controlPath()}
		}
		run := d.frontRun(addr, opts...)
		if err := run(); err != nil { // the first prompt
			b.Fatal(err)
		}
		benchLatency(b, run)
	}
	b.Run("front", func(b *testing.B) { front(b, false) })
	b.Run("front-mux", func(b *testing.B) { front(b, true) })
	for _, mux := range []bool{false, true} {
		name := "sshd"
		if mux {
			name = "sshd-mux"
		}
		b.Run(name, func(b *testing.B) {
			s, err := startSSH(newBenchEnv(b), b.TempDir())
			if errors.Is(err, errNoSSHD) {
				testutil.Missing(b, "%v", err)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			op := s.exec
			if mux {
				if err := s.startMaster(); err != nil {
					b.Fatal(err)
				}
				op = s.execMux
			}
			benchLatency(b, op)
		})
	}
}

// ---- smoke test (runs in CI) ----

// TestSSHDrivers runs each driver of this file a few times: `fleetmux dev` as a
// process, keystrokes through an attach, `ssh controller run` with its exit code.
func TestSSHDrivers(t *testing.T) {
	e := newBenchEnv(t)
	x, err := startRawEcho(e)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := x.key(); err != nil {
			t.Fatal(err)
		}
	}
	x.Close()
	d, err := startDevProc(t, e)
	if errors.Is(err, errNoSSHC) {
		testutil.Missing(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	a, err := startAttachEcho(d)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := a.key(); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	addr, err := d.api.newSession(devNode)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.frontRun(addr)(); err != nil {
		t.Fatal(err)
	}
	// The exit status is the command's: a failing command must fail the driver.
	if err := d.front.runRemote([]string{"run", addr, "--", "(exit 3)"}); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("ssh run of (exit 3): %v, want exit status 3", err)
	}
	if err := d.front.startMaster(); err != nil {
		t.Fatal(err)
	}
	if err := d.frontRun(addr, "-o", "ControlMaster=no", "-o", "ControlPath="+d.front.controlPath())(); err != nil {
		t.Fatal(err)
	}
}

// ---- report ----

// TestSSHBenchReport (only with FLEETMUX_BENCH_REPORT=1): keystroke echo and SSH
// run round trips, the variants interleaved in rotating order, and the tables of
// bench/README.md.
func TestSSHBenchReport(t *testing.T) {
	if os.Getenv("FLEETMUX_BENCH_REPORT") == "" {
		t.Skip("set FLEETMUX_BENCH_REPORT=1 to run the SSH benchmark report (about a minute)")
	}
	keys := envInt(t, "FLEETMUX_BENCH_KEYS", 1000)
	rounds := envInt(t, "FLEETMUX_BENCH_ROUNDS", 300)
	sshRounds := envInt(t, "FLEETMUX_BENCH_SSH_ROUNDS", 50)
	loadAvg := loadAverage()
	e := newBenchEnv(t)
	d, err := startDevProc(t, e)
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	sd, err := startSSH(e, t.TempDir())
	switch {
	case errors.Is(err, errNoSSHD):
		notes = append(notes, "no sshd rows: "+err.Error())
		sd = nil
	case err != nil:
		t.Fatal(err)
	default:
		defer sd.Close()
	}

	type variant struct {
		name, what string
		op         func() error
		ds         []time.Duration
		every      int
	}
	interleave := func(vs []*variant, n, warmup int) {
		for i := range warmup + n {
			for j := range vs {
				v := vs[(i+j)%len(vs)]
				if v.every > 1 && i%v.every != 0 {
					continue
				}
				t0 := time.Now()
				if err := v.op(); err != nil {
					t.Fatalf("%s: %v", v.name, err)
				}
				if i >= warmup {
					v.ds = append(v.ds, time.Since(t0))
				}
			}
		}
	}
	table := func(out *strings.Builder, vs []*variant, base string) {
		var b *variant
		for _, v := range vs {
			if v.name == base {
				b = v
			}
		}
		fmt.Fprintf(out, "| variant | runs | p50 | p99 | p50 − %s | p50 / %s | what |\n|---|---:|---:|---:|---:|---:|---|\n", base, base)
		for _, v := range vs {
			p50, p99 := percentile(v.ds, 50), percentile(v.ds, 99)
			fmt.Fprintf(out, "| %s | %d | %.0f µs | %.0f µs | %+.0f µs | %.2f× | %s |\n", v.name, len(v.ds), micros(p50), micros(p99),
				micros(p50-percentile(b.ds, 50)), float64(p50)/float64(percentile(b.ds, 50)), v.what)
		}
	}

	// Keystroke echo.
	raw, err := startRawEcho(e)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	att, err := startAttachEcho(d)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	echo := []*variant{
		{name: "rawpty", what: "a byte written to a raw PTY master, read back from cat", op: raw.key},
		{name: "attach", what: "`ssh -tt bench+ID@127.0.0.1 -p PORT` (OpenSSH client) → fleetmux SSH front door → NATS → node → PTY → cat, and back", op: att.key},
	}
	if sd != nil {
		se, err := startSSHDEcho(sd)
		if err != nil {
			t.Fatal(err)
		}
		defer se.Close()
		echo = append(echo, &variant{name: "sshd", what: "`ssh -tt 127.0.0.1 -p PORT 'stty -icanon -echo; cat'` (OpenSSH client → sshd → PTY → cat)", op: se.key})
	}
	loadEcho := loadAverage()
	interleave(echo, keys, 50)

	// run round trips.
	addr, err := d.api.newSession(devNode)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.api.apiRun(addr); err != nil {
		t.Fatal(err)
	}
	if err := d.front.startMaster(); err != nil {
		t.Fatal(err)
	}
	every := max(1, rounds/sshRounds)
	fresh := []string{"-o", "ControlMaster=no", "-o", "ControlPath=none"}
	mux := []string{"-o", "ControlMaster=no", "-o", "ControlPath=" + d.front.controlPath()}
	run := []*variant{
		{name: "api", what: "POST /v1/sessions/bench/ID/run (HTTP keep-alive), for reference", op: func() error { return d.api.apiRun(addr) }},
		{name: "front", what: "`ssh -p PORT 127.0.0.1 run bench/ID -- true`, a fresh connection each", op: d.frontRun(addr, fresh...), every: every},
		{name: "front-mux", what: "the same over a ControlMaster connection", op: d.frontRun(addr, mux...)},
	}
	if sd != nil {
		if err := sd.startMaster(); err != nil {
			t.Fatal(err)
		}
		run = append(run,
			&variant{name: "sshd", what: "`ssh -p PORT 127.0.0.1 true` against OpenSSH's sshd, a fresh connection each", op: sd.exec, every: every},
			&variant{name: "sshd-mux", what: "the same over a ControlMaster connection", op: sd.execMux})
	}
	loadRun := loadAverage()
	interleave(run, rounds, 10)

	var out strings.Builder
	fmt.Fprintf(&out, "\n%s, %s, %s\n\n", time.Now().Format("2006-01-02"), toolVersion("bash", "--version"), sshVersion())
	for _, n := range notes {
		fmt.Fprintf(&out, "note: %s\n", n)
	}
	fmt.Fprintf(&out, "Keystroke echo, %d keystrokes per variant, interleaved, after 50 warm-up ones (load average before the run: %s; before this part: %s):\n\n", keys, loadAvg, loadEcho)
	table(&out, echo, "rawpty")
	fmt.Fprintf(&out, "\nRound trip of `true`, %d interleaved rounds after 10 warm-up rounds, the fresh-connection variants in one round of %d (load average before: %s):\n\n", rounds, every, loadRun)
	base := "sshd"
	if sd == nil {
		base = "front"
	}
	table(&out, run, base)
	fmt.Print(out.String())
}
