// Package sandbox confines a session's program with the kernel before it runs:
// Landlock for files and TCP ports, an empty network namespace, cgroups for pids,
// memory and CPU, no new privileges, no capabilities, no new user namespaces.
//
// Go cannot run code between fork and exec, so a confined program is started
// through this package's wrapper: the same binary re-executed with the hidden
// verb "sandbox-exec" (Wrap builds its argv). The wrapper reads its Spec from an
// inherited pipe (never argv or environment), applies it to itself, and
// execve's the program. Any binary that links this package answers the verb in
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
// failure on, closed by the exec when it succeeds.
const FD = 5

// ErrUnsupported matches an error of a Spec the kernel cannot enforce.
var ErrUnsupported = errors.New("sandbox: not enforceable here")

// Spec is what the wrapper applies before it runs the program.
type Spec struct {
	// Profile confines files, network and resources; nil: only Hide applies.
	Profile *api.SandboxProfile `json:"profile,omitempty"`
	// Write are more paths the program may write (e.g. its integration files).
	Write []string `json:"write,omitempty"`
	// Hide are more paths the program may neither read nor write (the node's
	// data dir), whatever the profile.
	Hide []string `json:"hide,omitempty"`
	// Cgroup names the session's cgroup under the fleetmux group (required with
	// limits).
	Cgroup string `json:"cgroup,omitempty"`
	// Cred, when set, runs the program as UID, GID, Groups (dropped by the wrapper
	// after it joined the cgroup and namespace).
	Cred   bool     `json:"cred,omitempty"`
	UID    uint32   `json:"uid,omitempty"`
	GID    uint32   `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"`
}

// Wrapped is a program wrapped for the sandbox: run Argv with Child as the
// child's fds FD and FD+1, then CloseChild, then Wait.
type Wrapped struct {
	Argv  []string
	Child []*os.File
	done  *os.File // the read end of the report pipe
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
	if len(b) > 60<<10 {
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

// CloseChild closes the child's ends (once it started, or when it will not).
func (w *Wrapped) CloseChild() {
	for _, f := range w.Child {
		f.Close()
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
		return fmt.Errorf("sandbox: %s", msg)
	}
	return nil
}

// unsupportedMark starts a report of an ErrUnsupported failure.
const unsupportedMark = "unsupported: "

func init() {
	if len(os.Args) > 4 && os.Args[1] == Verb && os.Args[3] == "--" {
		fd, err := strconv.Atoi(os.Args[2])
		if err == nil {
			err = run(fd, os.Args[4:])
		}
		// run returns only on failure: the program never ran.
		msg := err.Error()
		if errors.Is(err, ErrUnsupported) {
			msg = unsupportedMark + msg
		}
		_, _ = unix.Write(FD+1, []byte(msg))
		fmt.Fprintf(os.Stderr, "fleetmux: sandbox: %v\r\n", err)
		os.Exit(126)
	}
}
