package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/testutil"
	"github.com/fleetmux/fleetmux/session"
)

const (
	cols, rows = 120, 40

	// opTimeout bounds one round trip; throughputTimeout one throughput run.
	opTimeout         = 10 * time.Second
	throughputTimeout = 120 * time.Second

	// payloadBytes is what the throughput command prints (before the terminal turns
	// each "\n" into "\r\n").
	payloadBytes = 32_000_000
)

// payloadCmd prints payloadBytes of 81-byte lines (80 x and a newline).
var payloadCmd = "yes " + string(bytes.Repeat([]byte("x"), 80)) + " | head -c " + strconv.Itoa(payloadBytes)

// benchEnv is the environment shared by every driver: a private, empty HOME (so no
// user rc file runs) and the caller's PATH.
type benchEnv struct {
	home, dir, runtime string
	base               []string
}

func newBenchEnv(tb testing.TB) benchEnv {
	tb.Helper()
	root := tb.TempDir()
	e := benchEnv{home: filepath.Join(root, "home"), dir: filepath.Join(root, "work"), runtime: filepath.Join(root, "rt")}
	for _, d := range []string{e.home, e.dir, e.runtime} {
		if err := os.Mkdir(d, 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	e.base = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "TERM=xterm-256color", "LANG=C.UTF-8"}
	return e
}

// ---- fleetmux session ----

func startSession(tb testing.TB, e benchEnv) *session.Session {
	tb.Helper()
	s, err := session.Start(session.Config{Shell: "bash", Dir: e.dir, BaseEnv: e.base, RuntimeDir: e.runtime, Cols: cols, Rows: rows})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	// The first Run waits for the first prompt; do it outside any measurement.
	if _, err := sessionRun(s, "true", opTimeout); err != nil {
		tb.Fatal(err)
	}
	return s
}

// startHeldSession is startSession for a session kept by a holder (the default of
// `fleetmux node` and `dev`): a holder server in this process, on its own socket,
// the session its client; the PTY, the program and the raw output are the holder's,
// the output comes to the session over the holder's stream.
func startHeldSession(tb testing.TB, e benchEnv) *session.Session {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "holder")
	srv, err := holder.Listen(holder.Config{Dir: dir, IdleExit: -1})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx) }()
	c, err := holder.Dial(ctx, dir)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := session.Start(session.Config{ID: "h1", Shell: "bash", Dir: e.dir, BaseEnv: e.base, RuntimeDir: e.runtime, Cols: cols, Rows: rows, Holder: c})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close(); c.Close(); cancel(); <-done; srv.Close() })
	if _, err := sessionRun(s, "true", opTimeout); err != nil {
		tb.Fatal(err)
	}
	return s
}

// sessionRun runs command and checks that its block finished with exit code 0.
func sessionRun(s *session.Session, command string, timeout time.Duration) (session.Result, error) {
	res, err := s.Run(context.Background(), command, session.RunOptions{Timeout: timeout})
	if err != nil {
		return res, fmt.Errorf("session run %q: %w", command, err)
	}
	b := res.Block
	if b.State != session.BlockDone {
		return res, fmt.Errorf("session run %q: block %d still %s after %v", command, b.N, b.State, timeout)
	}
	if b.ExitCode == nil || *b.ExitCode != 0 {
		return res, fmt.Errorf("session run %q: exit code %v, text %q", command, b.ExitCode, res.Text)
	}
	return res, nil
}

// sessionThroughput runs payloadCmd and checks that the block holds all its output.
func sessionThroughput(s *session.Session) error {
	res, err := sessionRun(s, payloadCmd, throughputTimeout)
	if err == nil && res.Block.End-res.Block.Start < payloadBytes {
		err = fmt.Errorf("session: block %d holds %d bytes, want >= %d", res.Block.N, res.Block.End-res.Block.Start, payloadBytes)
	}
	return err
}

// checkScreen takes a screen snapshot and checks it shows the payload's lines.
func checkScreen(s *session.Session) error {
	sc, err := s.Screen()
	if err == nil && !strings.Contains(sc.Text, "\n"+strings.Repeat("x", 80)+"\n") {
		err = fmt.Errorf("session: screen does not show the payload: %q", sc.Text)
	}
	return err
}

// ---- raw PTY ----

// rawPTY is bash in a PTY driven directly: what a client without fleetmux can do
// at best. The master is non-blocking, so every read has a deadline.
type rawPTY struct {
	cmd    *exec.Cmd
	master *os.File
	buf    []byte // output read but not yet consumed
	rd     []byte // read scratch
	n      int    // round trips done

	prompt, done []byte // with fleetmux's hooks (startRawHooks): the A mark and the D mark of exit 0
}

func startRawPTY(e benchEnv) (*rawPTY, error) {
	r, err := startPTY(e, []string{"bash", "--norc", "--noprofile", "-i"}, "PS1=", "PS2=")
	if err != nil {
		return nil, err
	}
	// Wait until bash runs commands.
	if err = r.type_("echo READY$((1+1))\r"); err == nil {
		_, err = r.readUntil([]byte("READY2\r\n"), time.Now().Add(opTimeout))
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("raw pty: bash not ready: %w", err)
	}
	return r, nil
}

// startPTY starts argv in a new PTY (its own session and process group).
func startPTY(e benchEnv, argv []string, env ...string) (*rawPTY, error) {
	return startPTYFiles(e, nil, argv, env...)
}

// startPTYFiles is startPTY with extra files for the child (its fd 3 on).
func startPTYFiles(e benchEnv, extra []*os.File, argv []string, env ...string) (*rawPTY, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, err
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: cols, Rows: rows}); err != nil {
		ptmx.Close()
		tty.Close()
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = e.dir
	cmd.Env = append(slices.Clone(e.base), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	cmd.ExtraFiles = extra
	err = cmd.Start()
	tty.Close()
	if err != nil {
		ptmx.Close()
		return nil, err
	}
	// pty.Open returns a blocking master, which the runtime poller cannot interrupt: a
	// non-blocking dup makes SetReadDeadline work.
	fd, err := unix.Dup(int(ptmx.Fd()))
	ptmx.Close()
	if err == nil {
		unix.CloseOnExec(fd)
		if err = unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return nil, err
	}
	return &rawPTY{cmd: cmd, master: os.NewFile(uintptr(fd), "/dev/ptmx"), rd: make([]byte, 32<<10)}, nil
}

func (r *rawPTY) type_(s string) error {
	_ = r.master.SetWriteDeadline(time.Now().Add(opTimeout))
	_, err := r.master.Write([]byte(s))
	return err
}

// readUntil reads until marker appears in the output and consumes the output up to
// and including it. It returns the number of bytes read from the master.
func (r *rawPTY) readUntil(marker []byte, deadline time.Time) (int64, error) {
	var total int64
	if err := r.master.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	for {
		if i := bytes.Index(r.buf, marker); i >= 0 {
			r.buf = append(r.buf[:0], r.buf[i+len(marker):]...)
			return total, nil
		}
		if k := len(marker) - 1; len(r.buf) > k { // only a partial marker can matter
			r.buf = append(r.buf[:0], r.buf[len(r.buf)-k:]...)
		}
		n, err := r.master.Read(r.rd)
		total += int64(n)
		r.buf = append(r.buf, r.rd[:n]...)
		if err != nil {
			return total, fmt.Errorf("raw pty: waiting for %q: %w (last output %q)", marker, err, r.buf[max(0, len(r.buf)-200):])
		}
	}
}

// roundTrip types `echo M$((N+1))` and reads until its output M<N+1> appears (the
// echoed command line holds `$((`, so it cannot match).
func (r *rawPTY) roundTrip() error {
	r.n++
	if err := r.type_("echo M$((" + strconv.Itoa(r.n-1) + "+1))\r"); err != nil {
		return err
	}
	_, err := r.readUntil([]byte("M"+strconv.Itoa(r.n)+"\r\n"), time.Now().Add(opTimeout))
	return err
}

// throughput runs payloadCmd and reads until the end marker printed after it. It
// returns the bytes read.
func (r *rawPTY) throughput() (int64, error) {
	if err := r.type_(payloadCmd + "; echo END$((1+1))\r"); err != nil {
		return 0, err
	}
	return r.readUntil([]byte("END2\r\n"), time.Now().Add(throughputTimeout))
}

// Close kills bash (and its process group), closes the master and reaps bash.
func (r *rawPTY) Close() error {
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	err := r.master.Close()
	_ = r.cmd.Wait()
	return err
}

// ---- raw PTY with fleetmux's shell hooks (diagnostic) ----

// startRawHooks starts bash exactly as a session does (`bash --rcfile RC -i`, so
// /etc/bash.bashrc runs too) with session's own bash integration (session.BashRC). It
// lets rawpty+hooks measure what the shell side of the integration costs (prompt
// hooks, OSC 133 marks, bracketed paste) with a client that does nothing but look for
// the D mark, so that session vs rawpty+hooks is the cost of fleetmux's own Go code.
func startRawHooks(e benchEnv) (*rawPTY, error) {
	rc, nonce, nf, err := session.BashRC(e.runtime)
	if err != nil {
		return nil, err
	}
	defer nf.Close()
	r, err := startPTYFiles(e, []*os.File{nf}, []string{"bash", "--rcfile", rc, "-i"})
	if err != nil {
		return nil, err
	}
	r.prompt = []byte("\x1b]133;fm=" + nonce + ";A\a")
	r.done = []byte("\x1b]133;fm=" + nonce + ";D;0\a")
	return r, nil
}

// hooksRoundTrip does what Session.Run("true") does on the wire: wait for the prompt
// (A mark), type the command as a bracketed paste, read until the D mark.
func (r *rawPTY) hooksRoundTrip() error {
	deadline := time.Now().Add(opTimeout)
	if _, err := r.readUntil(r.prompt, deadline); err != nil {
		return err
	}
	if err := r.type_("\x1b[200~true\x1b[201~\r"); err != nil {
		return err
	}
	_, err := r.readUntil(r.done, deadline)
	return err
}

// ---- tmux ----

var tmuxSeq atomic.Int64

// tmuxDriver is a private tmux server (its own socket under its own TMUX_TMPDIR)
// running bash, driven the way agents drive tmux: send-keys, then wait-for.
type tmuxDriver struct {
	bin    string
	sock   string // -L name
	target string
	env    []string
	pid    int // server pid
	n      int
}

var errNoTmux = errors.New("tmux not installed")

func startTmux(e benchEnv, tmpdir string) (*tmuxDriver, error) {
	bin, err := exec.LookPath("tmux")
	if err != nil {
		return nil, errNoTmux
	}
	t := &tmuxDriver{
		bin:    bin,
		sock:   fmt.Sprintf("fmbench-%d-%d", os.Getpid(), tmuxSeq.Add(1)),
		target: "fmbench",
		env:    append(slices.Clone(e.base), "TMUX_TMPDIR="+tmpdir),
	}
	if _, err := t.tmux(opTimeout, "-f", "/dev/null", "new-session", "-d", "-s", t.target, "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), "-c", e.dir, "bash --norc --noprofile"); err != nil {
		return nil, err
	}
	out, err := t.tmux(opTimeout, "display-message", "-p", "-t", t.target, "#{pid}")
	if err == nil {
		t.pid, err = strconv.Atoi(string(bytes.TrimSpace(out)))
	}
	if err == nil {
		err = t.roundTrip() // bash is up
	}
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// tmux runs one tmux client command with a deadline.
func (t *tmuxDriver) tmux(timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, t.bin, append([]string{"-L", t.sock}, args...)...)
	cmd.Env = t.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("tmux %q: %w: %s", args, err, out)
	}
	return out, nil
}

// roundTrip sends `true; tmux wait-for -S fmN` and Enter, then waits on channel fmN.
// (A signal sent before the wait-for starts is remembered by the server.)
func (t *tmuxDriver) roundTrip() error {
	t.n++
	ch := "fm" + strconv.Itoa(t.n)
	if _, err := t.tmux(opTimeout, "send-keys", "-t", t.target, "true; tmux -L "+t.sock+" wait-for -S "+ch, "Enter"); err != nil {
		return err
	}
	_, err := t.tmux(opTimeout, "wait-for", ch)
	return err
}

// Close kills the server (and with it bash).
func (t *tmuxDriver) Close() error {
	_, err := t.tmux(opTimeout, "kill-server")
	if err != nil && t.pid > 0 {
		_ = syscall.Kill(t.pid, syscall.SIGKILL)
	}
	return err
}

// ---- smoke test (runs in CI: a few operations of each driver) ----

func TestDrivers(t *testing.T) {
	e := newBenchEnv(t)
	s := startSession(t, e)
	for range 3 {
		if _, err := sessionRun(s, "true", opTimeout); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sessionRun(s, "yes | head -c 20000", opTimeout); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Screen(); err != nil {
		t.Fatal(err)
	}

	r, err := startRawPTY(e)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for range 3 {
		if err := r.roundTrip(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.type_("yes | head -c 100000; echo END$((1+1))\r"); err != nil {
		t.Fatal(err)
	}
	n, err := r.readUntil([]byte("END2\r\n"), time.Now().Add(opTimeout))
	if err != nil {
		t.Fatal(err)
	}
	if n < 150000 { // 50000 lines of "y\r\n"
		t.Fatalf("raw pty read %d bytes, want >= 150000", n)
	}
	h, err := startRawHooks(e)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for range 3 {
		if err := h.hooksRoundTrip(); err != nil {
			t.Fatal(err)
		}
	}
	// A marker that never comes fails at the deadline instead of hanging.
	if _, err := r.readUntil([]byte("NEVER"), time.Now().Add(20*time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("readUntil past deadline: %v, want ErrDeadlineExceeded", err)
	}

	if testutil.WantTool(t, "tmux") == "" {
		return
	}
	tm, err := startTmux(e, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := tm.roundTrip(); err != nil {
			tm.Close()
			t.Fatal(err)
		}
	}
	if err := tm.Close(); err != nil {
		t.Fatal(err)
	}
}
