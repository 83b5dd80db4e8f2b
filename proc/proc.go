// Package proc runs one-shot processes without a terminal (DESIGN "Exec"): the
// process gets its own process group, stdin from the caller or /dev/null, and
// its stdout and stderr each go to a capture that keeps the first and the newest
// bytes and counts them all. Nothing here decides whether a process may run:
// the node asks its guard first.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// ErrStart is the cause of a process that could not be started (no such
// program, a cwd that is not a directory, …).
var ErrStart = errors.New("not started")

// Spec is one process to start.
type Spec struct {
	// Argv is the program and its arguments; Argv[0] is looked up in the node's PATH.
	Argv []string
	// Dir is the working directory ("": the node's).
	Dir string
	// Env is the whole environment (Environ builds it).
	Env []string
	// Stdin, when not nil, is the process's standard input; nil: /dev/null.
	Stdin []byte
	// ExtraFiles are given to the process as its fds 3, 4, … (nil: closed).
	ExtraFiles []*os.File
	// HeadBytes and TailBytes are how much of each stream is kept: its first
	// HeadBytes and its newest TailBytes bytes.
	HeadBytes, TailBytes int
	// Redact, when not nil, makes a redactor for each stream: what the process
	// writes passes through it before it is kept, so every read (a cut, a
	// window at any offset) sees only redacted bytes, at offsets of the
	// redacted stream. Redacting on read instead would let a reader choose
	// windows that split a secret so no pattern matches either piece. It is
	// called when the stream's first bytes come (a process started ahead of its
	// program gets the redactor in force when the program writes); a nil
	// Redactor keeps the stream as it is.
	Redact func() Redactor
	// Attr, when set, adjusts the process's SysProcAttr before it starts (the
	// sandbox wrapper's user namespace on a node without root).
	Attr func(*syscall.SysProcAttr)
	// Stdout and Stderr, when not nil, get each stream's kept bytes (redacted)
	// too, in order, as they are kept; their errors are ignored (the writer
	// deals with them). Done is closed after their last write.
	Stdout, Stderr io.Writer
	// Status, when not nil, is the read end of a pipe on which the process
	// reports how its program ended before it exits itself (a sandbox wrapper
	// that started the program as its child: sandbox.Wrapped.Status): that
	// report is the process's end (its Exit, Done, Wait); the process itself is
	// then killed and reaped after (Close waits). Without a report (the pipe
	// ends first) its own wait status counts. Start takes it over.
	Status *os.File
}

// Redactor redacts one stream (policy.Redactor): Write takes the next bytes and
// returns what may be kept (it may hold back the start of a possible match);
// Flush returns what it holds at the stream's end. A result is valid until the
// next call.
type Redactor interface {
	Write(p []byte) []byte
	Flush() []byte
}

// Exit is how a process ended.
type Exit struct {
	// Code is the exit status; for a process ended by a signal, 128+N (as a
	// shell reports it), and Signal names it ("SIGKILL").
	Code   int
	Signal string
	// Killed: Kill ended it (a timeout, a DELETE).
	Killed   bool
	Duration time.Duration
}

// Proc is one running (or ended) process. Its methods are safe for concurrent use.
type Proc struct {
	cmd            *exec.Cmd
	stdout, stderr *capture
	done           chan struct{} // closed once the process has ended and its output is read

	status *os.File      // Spec.Status
	reaped chan struct{} // closed once the process itself is reaped

	mu      sync.Mutex // guards exit, killed and started
	exit    Exit
	killed  bool
	started time.Time
}

// readGrace bounds the wait for a stream's end once the process and its process
// group are gone: a process that left the group (setsid) may hold the pipe.
const readGrace = time.Second

// Start starts spec's process. Its error wraps ErrStart when the program could
// not be started.
func Start(spec Spec) (*Proc, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		if spec.Status != nil {
			spec.Status.Close()
		}
		return nil, fmt.Errorf("%w: empty argv", ErrStart)
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir, cmd.Env, cmd.ExtraFiles = spec.Dir, spec.Env, spec.ExtraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if spec.Attr != nil {
		spec.Attr(cmd.SysProcAttr)
	}
	if spec.Stdin != nil {
		cmd.Stdin = bytes.NewReader(spec.Stdin)
	}
	p := &Proc{cmd: cmd, stdout: newCapture(spec.HeadBytes, spec.TailBytes), stderr: newCapture(spec.HeadBytes, spec.TailBytes), done: make(chan struct{}), status: spec.Status, reaped: make(chan struct{})}
	p.stdout.sink, p.stderr.sink = spec.Stdout, spec.Stderr
	// The process writes to pipes of our own, so Wait returns when it exits and
	// not when the last holder of a pipe closes it.
	var readers []*os.File
	for _, c := range []*capture{p.stdout, p.stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(readers)
			p.closeStatus()
			return nil, fmt.Errorf("proc: pipe: %w", err)
		}
		readers = append(readers, r)
		if c == p.stdout {
			cmd.Stdout = w
		} else {
			cmd.Stderr = w
		}
	}
	p.started = time.Now()
	err := cmd.Start()
	cmd.Stdout.(*os.File).Close()
	cmd.Stderr.(*os.File).Close()
	if err != nil {
		closeAll(readers)
		p.closeStatus()
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	var copies sync.WaitGroup
	for i, c := range []*capture{p.stdout, p.stderr} {
		copies.Add(1)
		var w io.Writer = c
		if spec.Redact != nil {
			w = &redacting{c: c, make: spec.Redact}
		}
		go func() { // owned by p: waited for before done closes
			defer copies.Done()
			_, _ = io.Copy(w, readers[i])
			if rw, ok := w.(*redacting); ok && rw.r != nil {
				c.Write(rw.r.Flush())
			}
		}()
	}
	go p.reap(readers, &copies) // owned by p: ends with the process (done)
	return p, nil
}

// redacting keeps what its redactor releases of a stream; the redactor is made
// at the first write (nil: the bytes are kept as they come).
type redacting struct {
	c       *capture
	make    func() Redactor
	r       Redactor
	decided bool
}

func (w *redacting) Write(p []byte) (int, error) {
	if !w.decided {
		w.r, w.decided = w.make(), true
	}
	if w.r == nil {
		w.c.Write(p)
		return len(p), nil
	}
	w.c.Write(w.r.Write(p))
	return len(p), nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// reap waits for the process, ends what it left in its process group, reads
// its streams to their end (or readGrace) and closes done.
func (p *Proc) reap(readers []*os.File, copies *sync.WaitGroup) {
	waited := make(chan error, 1)
	go func() { // owned by p: ends when the process is reaped (Close waits)
		err := p.cmd.Wait()
		close(p.reaped)
		waited <- err
	}()
	var err error
	var rep *Exit
	if p.status != nil {
		reported := make(chan *Exit, 1)
		go func() { reported <- readStatus(p.status) }() // ends at the report or the pipe's end (the process's exit)
		select {
		case rep = <-reported:
			if rep == nil {
				err = <-waited
			}
		case err = <-waited:
			// A report made before the process ended counts; one another holder
			// of the pipe might still make does not.
			_ = p.status.SetReadDeadline(time.Now().Add(statusGrace))
			rep = <-reported
		}
		p.closeStatus()
	} else {
		err = <-waited
	}
	dur := time.Since(p.Started())
	// A process the command left behind in its group ends with it: the group id
	// stays reserved while any member lives, so this reaches only them.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	read := make(chan struct{})
	go func() { copies.Wait(); close(read) }() // ends when the copies do: closed readers end them
	t := time.NewTimer(readGrace)
	select {
	case <-read:
	case <-t.C:
		closeAll(readers)
		<-read
	}
	t.Stop()
	closeAll(readers)
	ex := Exit{Duration: dur, Code: -1}
	var ee *exec.ExitError
	if rep != nil {
		ex.Code, ex.Signal = rep.Code, rep.Signal
	} else if errors.As(err, &ee) || err == nil {
		st := p.cmd.ProcessState
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ex.Code, ex.Signal = 128+int(ws.Signal()), SignalName(ws.Signal())
		} else {
			ex.Code = st.ExitCode()
		}
	}
	p.mu.Lock()
	ex.Killed = p.killed
	p.exit = ex
	p.mu.Unlock()
	close(p.done)
}

// statusGrace bounds the wait for a report once the process has ended.
const statusGrace = 100 * time.Millisecond

// readStatus reads a report of how a program ended ("x" and its exit code, or
// "s" and the signal's number, and a newline): nil when the pipe ends first or
// holds something else.
func readStatus(f *os.File) *Exit {
	var b [16]byte
	n, _ := f.Read(b[:]) // one write of a few bytes: whole or not at all
	return parseStatus(b[:n])
}

// parseStatus parses a report readStatus read: nil when it is not one.
func parseStatus(b []byte) *Exit {
	msg, ok := strings.CutSuffix(string(b), "\n")
	if !ok || len(msg) < 2 {
		return nil
	}
	v, err := strconv.Atoi(msg[1:])
	if err != nil || v < 0 || v > 255 {
		return nil
	}
	switch msg[0] {
	case 'x':
		return &Exit{Code: v}
	case 's':
		s := syscall.Signal(v)
		return &Exit{Code: 128 + v, Signal: SignalName(s)}
	}
	return nil
}

func (p *Proc) closeStatus() {
	if p.status != nil {
		p.status.Close()
	}
}

// Close waits until the process itself is reaped: with a status pipe, shortly
// after Done (the process is killed at its report).
func (p *Proc) Close() {
	<-p.done
	<-p.reaped
}

// Done is closed once the process has ended and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exit is how the process ended; ok is false while it runs.
func (p *Proc) Exit() (ex Exit, ok bool) {
	select {
	case <-p.done:
	default:
		return Exit{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit, true
}

// Wait waits until the process ends or ctx does (ok false).
func (p *Proc) Wait(ctx context.Context) (Exit, bool) {
	select {
	case <-p.done:
		return p.Exit()
	case <-ctx.Done():
		return Exit{}, false
	}
}

// Kill ends the process and its process group with SIGKILL (nothing once it
// has ended). Its Exit says Killed.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// Started is when the process started.
func (p *Proc) Started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Restart times the process from t on: a process started ahead of its program
// (a sandbox wrapper waiting for it) is timed from when it got it.
func (p *Proc) Restart(t time.Time) {
	p.mu.Lock()
	p.started = t
	p.mu.Unlock()
}

// Pid is the process's id (its process group's too).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Duration is how long it ran (so far, while it runs).
func (p *Proc) Duration() time.Duration {
	if ex, ok := p.Exit(); ok {
		return ex.Duration
	}
	return time.Since(p.Started())
}

func (p *Proc) stream(name string) (*capture, error) {
	switch name {
	case api.StreamStdout:
		return p.stdout, nil
	case api.StreamStderr:
		return p.stderr, nil
	}
	return nil, fmt.Errorf("stream %q: want stdout or stderr", name)
}

// Cut returns a stream cut to at most budget bytes (head and tail around a
// marker line) and how many bytes it leaves out, and the stream's length.
func (p *Proc) Cut(stream string, budget int) (text []byte, omitted, length int64) {
	c, err := p.stream(stream)
	if err != nil {
		return nil, 0, 0
	}
	text, omitted = c.Cut(budget)
	return text, omitted, c.Len()
}

// ReadAt returns up to limit bytes of a stream from offset from (see
// capture.ReadAt).
func (p *Proc) ReadAt(stream string, from int64, limit int) (data []byte, off, end, oldest int64, err error) {
	c, err := p.stream(stream)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	data, off, end, oldest = c.ReadAt(from, limit)
	return data, off, end, oldest, nil
}

// Environ is a process's environment: base (the node's own) without the
// variables that hold fleetmux or NATS secrets (api.SecretEnv), with those that
// keep a program from acting as if a terminal were there (TERM=dumb, NO_COLOR=1,
// PAGER=cat, GIT_PAGER=cat), then extra over them; sorted.
func Environ(base []string, extra map[string]string) []string {
	m := map[string]string{}
	for _, kv := range base {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k != "" && !api.SecretEnv(k) {
			m[k] = v
		}
	}
	for k, v := range map[string]string{"TERM": "dumb", "NO_COLOR": "1", "PAGER": "cat", "GIT_PAGER": "cat"} {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// signalNames are the signals' usual names.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGCHLD: "SIGCHLD",
	syscall.SIGCONT: "SIGCONT", syscall.SIGSTOP: "SIGSTOP", syscall.SIGTSTP: "SIGTSTP", syscall.SIGTTIN: "SIGTTIN",
	syscall.SIGTTOU: "SIGTTOU", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}

// SignalName is a signal's usual name ("SIGKILL"), or "SIG" and its number.
func SignalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}
