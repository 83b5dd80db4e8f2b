// Package keeper runs a background exec outside the node agent, so that it
// outlives the agent (a crash, a kill -9, an upgrade) as a held session does:
// one keeper process per exec, the agent's own binary re-executed with the
// hidden verb "exec-keep" (answered in an init function, before main, so test
// binaries are keepers too, as with package sandbox). Start launches it
// detached (a session of its own) with its Spec on a pipe, never in argv or
// environment; the keeper starts the program with package proc (its own process
// group, killed with the keeper: a parent-death signal), redacts each stream as
// it is written and writes it to chunk files in the exec's directory (chunks.go),
// writes meta.json once the program runs and exit.json (atomically) once it has
// ended, and exits. Any agent, the one that started it or a later one, reads the
// exec from that directory (Open, Exec): its state, output and exit, and ends it
// by signalling the keeper, whose pid it checks against its start time first.
//
// An exec's directory holds only redacted output: the keeper redacts with the
// patterns in force when it started, before anything reaches the disk.
package keeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/policy"
	"github.com/fleetmux/fleetmux/proc"
)

// Verb is the hidden first argument that makes a binary linking this package a
// keeper: argv is {binary, Verb, DIR}.
const Verb = "exec-keep"

// File names in an exec's directory (besides the chunks stdout.N and stderr.N).
const (
	MetaName = "meta.json" // Meta, written once the program runs
	ExitName = "exit.json" // how it ended, written once it has
	LogName  = "keeper.log"
)

// Spec is what a keeper runs; it reaches the keeper on its stdin.
type Spec struct {
	// ID is the exec's id, the base name of its directory.
	ID string `json:"id"`
	// Argv is what runs (the sandbox wrapper's argv when it is wrapped); Shown
	// is the argv meta.json keeps (redacted).
	Argv  []string `json:"argv"`
	Shown []string `json:"shown"`
	// Owner is the principal that started it.
	Owner string   `json:"owner,omitempty"`
	Dir   string   `json:"dir,omitempty"`
	Env   []string `json:"env"`
	// Stdin is the program's standard input; nil: /dev/null.
	Stdin []byte `json:"stdin,omitempty"`
	// FDs are the keeper's file descriptors (from 3 on, as Start's files gives
	// them) the program gets at the same numbers (the sandbox wrapper's).
	FDs []int `json:"fds,omitempty"`
	// Unprivileged starts the program in a user namespace of its own
	// (sandbox.Unprivileged: the wrapper's mounts on a node without root).
	Unprivileged bool `json:"unprivileged,omitempty"`
	// Redacts are the redact patterns each stream passes through before it is
	// written (policy.NewRedact; one that does not compile starts nothing).
	Redacts []Pattern `json:"redacts,omitempty"`
	// Chunk is the size of a stream's chunk files (default DefaultChunk).
	Chunk int64 `json:"chunk,omitempty"`
}

// Pattern is one redact pattern.
type Pattern struct {
	Name    string `json:"name"`
	Pattern string `json:"pattern"`
}

// Meta is an exec's meta.json.
type Meta struct {
	ID        string    `json:"id"`
	Argv      []string  `json:"argv"`
	Owner     string    `json:"owner,omitempty"`
	StartedAt time.Time `json:"started_at"`
	Chunk     int64     `json:"chunk"`
	// Keeper is the keeper's pid and KeeperStart its start time (/proc/PID/stat,
	// clock ticks since boot): a pid with another start time is not the keeper.
	Keeper      int    `json:"keeper_pid"`
	KeeperStart uint64 `json:"keeper_start"`
	// Pgid is the program's process group.
	Pgid int `json:"pgid"`
}

// exitFile is an exec's exit.json.
type exitFile struct {
	Code     int    `json:"code"`
	Signal   string `json:"signal,omitempty"`
	Killed   bool   `json:"killed,omitempty"`
	Duration int64  `json:"duration_ns"`
}

// Bounds.
const (
	// DefaultChunk is a stream's chunk size when Spec.Chunk is 0.
	DefaultChunk = 1 << 20
	// maxChunk bounds Spec.Chunk.
	maxChunk = 64 << 20
	// maxSpec bounds a Spec's JSON.
	maxSpec = 16 << 20
	// startWait bounds the wait for a keeper's report.
	startWait = 10 * time.Second
)

// report is what a keeper writes on its stdout once: the program runs (Pid), or
// it did not start (Error; NotStarted when the program could not be started).
type report struct {
	Pid        int    `json:"pid,omitempty"`
	Error      string `json:"error,omitempty"`
	NotStarted bool   `json:"not_started,omitempty"`
}

// Start launches a keeper for spec in dir (DATA/execs/ID, made here 0700) and
// returns the exec once its program runs (a relative dir is taken from the
// caller's working directory). self is the keeper binary ("" for
// os.Executable); files are the keeper's fds 3, 4, … (nil entries: closed), for
// spec.FDs. An error starts nothing and leaves no directory; it wraps
// proc.ErrStart when the program could not be started.
func Start(self, dir string, spec Spec, files []*os.File) (*Exec, error) {
	if err := api.ValidName(spec.ID); err != nil || filepath.Base(dir) != spec.ID {
		return nil, fmt.Errorf("keeper: exec id %q for %s", spec.ID, dir)
	}
	// The keeper runs in "/": a dir relative to our cwd (the data dir of
	// `fleetmux dev` is ./.fleetmux) must reach it whole.
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	dir = abs
	if spec.Chunk == 0 {
		spec.Chunk = DefaultChunk
	}
	if spec.Chunk < 1 || spec.Chunk > maxChunk {
		return nil, fmt.Errorf("keeper: chunk of %d bytes", spec.Chunk)
	}
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("keeper: own binary: %w", err)
		}
		self = exe
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if len(b) > maxSpec {
		return nil, fmt.Errorf("keeper: spec of %d bytes", len(b))
	}
	if err := datadir.Mkdir(dir); err != nil {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	x, err := launch(self, dir, b, files)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return x, nil
}

func launch(self, dir string, spec []byte, files []*os.File) (*Exec, error) {
	logf, err := datadir.OpenFile(filepath.Join(dir, LogName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("keeper: log: %w", err)
	}
	defer logf.Close()
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("keeper: pipe: %w", err)
	}
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		return nil, fmt.Errorf("keeper: pipe: %w", err)
	}
	defer outR.Close()
	cmd := exec.Command(self, Verb, dir)
	cmd.Dir = "/"
	cmd.Env = []string{} // the keeper's own environment is empty: the program's comes in the spec
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, logf
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outside the agent's session and group: it outlives the agent
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		return nil, fmt.Errorf("keeper: launch %s: %w", self, err)
	}
	pid := cmd.Process.Pid
	// The keeper is reaped by Exec.Exit (wait4), not by a goroutine of ours:
	// it outlives this agent as often as not.
	_ = cmd.Process.Release()
	abort := func(err error) (*Exec, error) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		return nil, err
	}
	deadline := time.Now().Add(startWait)
	_ = inW.SetWriteDeadline(deadline)
	if _, err := inW.Write(spec); err != nil {
		return abort(fmt.Errorf("keeper: spec: %w (see %s)", err, filepath.Join(dir, LogName)))
	}
	inW.Close()
	_ = outR.SetReadDeadline(deadline)
	b, err := io.ReadAll(io.LimitReader(outR, 64<<10))
	if err != nil {
		return abort(fmt.Errorf("keeper: no report: %w (see %s)", err, filepath.Join(dir, LogName)))
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		return abort(fmt.Errorf("keeper: report %q: %v (see %s)", api.OneLine(string(b), 200), err, filepath.Join(dir, LogName)))
	}
	if rep.Error != "" {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil) // it exits after a failure
		if rep.NotStarted {
			return nil, fmt.Errorf("%w: %s", proc.ErrStart, rep.Error)
		}
		return nil, fmt.Errorf("keeper: %s", rep.Error)
	}
	if rep.Pid != pid {
		return abort(fmt.Errorf("keeper: pid %d reported by keeper %d", rep.Pid, pid))
	}
	x, err := Open(dir)
	if err != nil {
		return abort(err)
	}
	x.child = true
	return x, nil
}

func init() {
	if len(os.Args) == 3 && os.Args[1] == Verb {
		os.Exit(run(os.Args[2]))
	}
}

// run is the keeper: it runs the program of the Spec on its stdin in dir, and
// returns its own exit status once the program has ended and exit.json is
// written (0), or it failed (1).
func run(dir string) int {
	// The program's parent-death signal follows the thread that started it: this
	// goroutine keeps its thread to the end.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s keeper %d: %s\n", time.Now().UTC().Format(time.RFC3339), os.Getpid(), fmt.Sprintf(format, args...))
	}
	reported := false
	tell := func(r report) {
		b, _ := json.Marshal(r)
		_, _ = os.Stdout.Write(b)
		// fd 1 becomes /dev/null: the agent reads the report to its end.
		if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			_ = unix.Dup2(int(null.Fd()), 1)
			null.Close()
		}
		reported = true
	}
	fail := func(notStarted bool, err error) int {
		logf("%v", err)
		if !reported {
			tell(report{Error: err.Error(), NotStarted: notStarted})
		}
		return 1
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, maxSpec+1))
	if err != nil {
		return fail(false, fmt.Errorf("spec: %w", err))
	}
	var spec Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fail(false, fmt.Errorf("spec: %w", err))
	}
	if err := api.ValidName(spec.ID); err != nil || filepath.Base(dir) != spec.ID || spec.Chunk < 1 || spec.Chunk > maxChunk {
		return fail(false, fmt.Errorf("spec of exec %q, chunk %d, for %s", spec.ID, spec.Chunk, dir))
	}
	var pats []policy.Redact
	for _, r := range spec.Redacts {
		p, err := policy.NewRedact(r.Name, r.Pattern)
		if err != nil {
			return fail(false, err)
		}
		pats = append(pats, p)
	}
	var extra []*os.File
	for _, fd := range spec.FDs {
		if fd < 3 || fd > 255 {
			return fail(false, fmt.Errorf("fd %d", fd))
		}
		for len(extra) < fd-2 {
			extra = append(extra, nil)
		}
		extra[fd-3] = os.NewFile(uintptr(fd), "fd"+fmt.Sprint(fd))
	}
	outs := []*chunkWriter{
		{dir: dir, name: api.StreamStdout, chunk: spec.Chunk, logf: logf},
		{dir: dir, name: api.StreamStderr, chunk: spec.Chunk, logf: logf},
	}
	ps := proc.Spec{Argv: spec.Argv, Dir: spec.Dir, Env: spec.Env, Stdin: spec.Stdin, ExtraFiles: extra,
		Stdout: outs[0], Stderr: outs[1],
		Attr: func(a *syscall.SysProcAttr) {
			a.Pdeathsig = syscall.SIGKILL // the program ends with its keeper
			if spec.Unprivileged {
				sandbox.Unprivileged(a)
			}
		}}
	if len(pats) > 0 {
		ps.Redact = func() proc.Redactor { return policy.NewRedactor(pats) }
	}
	if len(ps.Argv) > 1 && ps.Argv[1] == sandbox.Verb && len(extra) <= sandbox.FD+3-3 {
		// The wrapper starts the program as its child and reports its end on
		// this pipe (sandbox.Wrapped.Status).
		r, w, err := os.Pipe()
		if err != nil {
			return fail(false, fmt.Errorf("pipe: %w", err))
		}
		for len(extra) < sandbox.FD+3-3 {
			extra = append(extra, nil)
		}
		extra = append(extra, w)
		ps.ExtraFiles, ps.Status = extra, r
	}
	p, err := proc.Start(ps)
	for _, f := range extra {
		if f != nil {
			f.Close() // the program has them (the wrapper's report pipe must end with it)
		}
	}
	if err != nil {
		return fail(errors.Is(err, proc.ErrStart), err)
	}
	start, err := procStart(os.Getpid())
	if err == nil {
		meta := Meta{ID: spec.ID, Argv: spec.Shown, Owner: spec.Owner, StartedAt: p.Started().UTC(), Chunk: spec.Chunk,
			Keeper: os.Getpid(), KeeperStart: start, Pgid: p.Pid()}
		err = writeJSON(filepath.Join(dir, MetaName), meta)
	}
	if err != nil {
		p.Kill()
		<-p.Done()
		return fail(false, fmt.Errorf("meta: %w", err))
	}
	tell(report{Pid: os.Getpid()})
	go func() { // ends with the keeper
		for s := range sigs {
			if s != syscall.SIGHUP { // no terminal: a HUP is no request to end
				p.Kill()
			}
		}
	}()
	<-p.Done()
	ex, _ := p.Exit()
	for _, w := range outs {
		w.close()
	}
	if err := writeJSON(filepath.Join(dir, ExitName), exitFile{Code: ex.Code, Signal: ex.Signal, Killed: ex.Killed, Duration: int64(ex.Duration)}); err != nil {
		logf("exit: %v", err)
		return 1
	}
	p.Close()
	return 0
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return datadir.WriteFile(path, b, 0o600)
}
