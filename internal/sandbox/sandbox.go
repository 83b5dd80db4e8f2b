// Package sandbox confines a session's program with the kernel before it runs:
// Landlock for files and TCP ports, an empty network namespace, cgroups for pids,
// memory and CPU, no new privileges, no capabilities, no new user namespaces.
//
// Go cannot run code between fork and exec, so a confined program is started
// through this package's wrapper: the same binary re-executed with the hidden
// verb "sandbox-exec" (Wrap builds its argv). The wrapper reads its Spec from an
// inherited pipe (never argv or environment), applies it to itself, and
// execve's the program (or, given a status pipe, starts it as its child and
// reports its end: Wrapped.Status). Any binary that links this package answers the verb in
// an init function, before main, so test binaries can be the wrapper too.
package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
)

// Verb is the hidden first argument that makes a binary linking this package
// the wrapper.
const Verb = "sandbox-exec"

// FD is the child's file descriptor the wrapper reads its Spec from (the
// session's nonce and guard channel use 3 and 4); FD+1 is the pipe it reports a
// failure on, closed by the exec when it succeeds; FD+2, when it is a namespace
// file, is a prepared mount namespace (WrapIn, LaterIn), never passed on to the
// program; FD+3, when it is a pipe, is the status pipe (Status).
const FD = 5

// ErrUnsupported matches an error of a Spec the kernel cannot enforce.
var ErrUnsupported = errors.New("sandbox: not enforceable here")

// ErrProgram matches the error of a wrapper that confined itself but could not
// execve the program (no such file, not executable): the caller's mistake, not
// the sandbox's.
var ErrProgram = errors.New("sandbox: the program did not start")

// Spec is what the wrapper applies before it runs the program.
type Spec struct {
	// Profile confines files, network and resources; nil: only Hide applies.
	Profile *api.SandboxProfile `json:"profile,omitempty"`
	// Write are more paths the program may write (e.g. its integration files).
	Write []string `json:"write,omitempty"`
	// Hide are more paths the program may neither read nor write (the node's
	// data dir), whatever the profile.
	Hide []string `json:"hide,omitempty"`
	// Mask: Hide only by mounts; a wrapper that cannot make them fails
	// (ErrUnsupported) instead of using Landlock's allow-list.
	Mask bool `json:"mask,omitempty"`
	// Cgroup names the session's cgroup under the fleetmux group (required with
	// limits).
	Cgroup string `json:"cgroup,omitempty"`
	// Cred, when set, runs the program as UID, GID, Groups (dropped by the wrapper
	// after it joined the cgroup and namespace).
	Cred   bool     `json:"cred,omitempty"`
	UID    uint32   `json:"uid,omitempty"`
	GID    uint32   `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"`
	// Argv, Dir and Env are the program of a wrapper started before it was known
	// (Later): it changes to Dir, and execve's Argv with Env (nil: its own).
	// A wrapper started by Wrap runs the argv it was given and ignores them.
	Argv []string `json:"argv,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	Env  []string `json:"env,omitempty"`
	// Prepared, set by WrapIn and Send when a prepared namespace fits: the
	// wrapper joins the namespace at FD+2 instead of masking Hide itself, once it
	// checked that each hidden path there looks as its Mark says; when it cannot
	// join it, or one does not, it masks as without.
	Prepared []Mark `json:"prepared,omitempty"`
	// Prepare: the wrapper of Prepare, which masks Hide, reports and waits.
	Prepare bool `json:"prepare,omitempty"`
}

// Wrapped is a program wrapped for the sandbox: run Argv with Child as the
// child's fds FD and FD+1, then CloseChild, then Wait.
type Wrapped struct {
	Argv  []string
	Child []*os.File
	done  *os.File   // the read end of the report pipe
	spec  *os.File   // Later's: the write end of the spec pipe, until Send
	ns    *Namespace // LaterIn's: the prepared namespace the wrapper holds
}

// Wrap returns argv wrapped to run under spec. self is the wrapper binary (""
// for os.Executable).
func Wrap(self string, spec Spec, argv []string) (*Wrapped, error) {
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("sandbox: own binary: %w", err)
		}
		self = exe
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if len(b) > maxSpec {
		return nil, fmt.Errorf("sandbox: spec of %d bytes", len(b))
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	_, err = w.Write(b) // under the pipe's buffer: never blocks
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sandbox: spec: %w", err)
	}
	dr, dw, err := os.Pipe()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	return &Wrapped{Argv: append([]string{self, Verb, strconv.Itoa(FD), "--"}, argv...), Child: []*os.File{r, dw}, done: dr}, nil
}

// maxSpec bounds a Spec's JSON (it must fit the pipe's buffer: writing never blocks).
const maxSpec = 60 << 10

// Later is Wrap for a program not known yet: start Argv (with Child) now, and
// the wrapper does its start-up (a Go binary's, milliseconds) ahead of time and
// then waits, unconfined but running nothing else, until Send gives it the Spec
// with the program (Spec.Argv, Dir, Env). Then CloseChild (once started) and
// Wait as with Wrap; Close when it will not be used.
func Later(self string) (*Wrapped, error) {
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("sandbox: own binary: %w", err)
		}
		self = exe
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	dr, dw, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	return &Wrapped{Argv: []string{self, Verb, strconv.Itoa(FD), "--"}, Child: []*os.File{r, dw}, done: dr, spec: w}, nil
}

// Send gives a wrapper from Later its Spec: what to confine and the program to
// run (spec.Argv must be set). It fails, sending nothing, when the Spec is too
// large; it can be sent once.
func (w *Wrapped) Send(spec Spec) error {
	if w.spec == nil {
		return errors.New("sandbox: no wrapper waits for a spec")
	}
	if len(spec.Argv) == 0 {
		return errors.New("sandbox: a spec without a program")
	}
	spec.Prepared = nil
	if w.ns.Fits(spec) {
		spec.Prepared = w.ns.marks
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if len(b) > maxSpec {
		return fmt.Errorf("sandbox: spec of %d bytes", len(b))
	}
	_, err = w.spec.Write(b)
	w.spec.Close()
	w.spec = nil
	if err != nil {
		return fmt.Errorf("sandbox: spec: %w", err)
	}
	return nil
}

// Close releases what is left of w (a wrapper from Later that never got its Spec
// reads an empty one and fails, running nothing).
func (w *Wrapped) Close() {
	w.CloseChild()
	if w.spec != nil {
		w.spec.Close()
		w.spec = nil
	}
	w.done.Close()
}

// Status has the wrapper start the program as its child instead of
// execve'ing it, and report the program's end on a pipe before it exits as the
// program did: its child's fd FD+3 (Child's fourth file). It returns the pipe's
// read end, which the caller owns (proc.Spec.Status reads it). Call it before
// the wrapper starts.
func (w *Wrapped) Status() (*os.File, error) {
	r, sw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	for len(w.Child) < 3 {
		w.Child = append(w.Child, nil)
	}
	w.Child = append(w.Child[:3], sw)
	return r, nil
}

// CloseChild closes the child's ends (once it started, or when it will not).
func (w *Wrapped) CloseChild() {
	for _, f := range w.Child {
		if f != nil {
			f.Close()
		}
	}
	w.Child = nil
}

// Wait waits until the wrapper exec'd the program (nil) or failed (its reason,
// wrapping ErrUnsupported when the kernel lacks a part), at most timeout. It
// closes what is left of w.
func (w *Wrapped) Wait(timeout time.Duration) error {
	w.CloseChild()
	defer w.done.Close()
	_ = w.done.SetReadDeadline(time.Now().Add(timeout))
	msg, err := io.ReadAll(io.LimitReader(w.done, 4096))
	if err != nil {
		return fmt.Errorf("sandbox: the wrapper did not report: %w", err)
	}
	if len(msg) > 0 {
		if bytes.HasPrefix(msg, []byte(unsupportedMark)) {
			return fmt.Errorf("%w: %s", ErrUnsupported, msg[len(unsupportedMark):])
		}
		if bytes.HasPrefix(msg, []byte(programMark)) {
			return fmt.Errorf("%w: %s", ErrProgram, msg[len(programMark):])
		}
		return fmt.Errorf("sandbox: %s", msg)
	}
	return nil
}

// unsupportedMark starts a report of an ErrUnsupported failure, programMark one
// of an ErrProgram failure.
const (
	unsupportedMark = "unsupported: "
	programMark     = "program: "
)

func init() {
	if len(os.Args) > 3 && os.Args[1] == Verb && os.Args[3] == "--" {
		fd, err := strconv.Atoi(os.Args[2])
		if err == nil {
			err = run(fd, os.Args[4:])
		}
		// run returns only on failure: the program never ran.
		msg := err.Error()
		switch {
		case errors.Is(err, ErrUnsupported):
			msg = unsupportedMark + msg
		case errors.Is(err, ErrProgram):
			msg = programMark + msg
		}
		_, _ = unix.Write(FD+1, []byte(msg))
		fmt.Fprintf(os.Stderr, "fleetmux: sandbox: %v\r\n", err)
		os.Exit(126)
	}
}
