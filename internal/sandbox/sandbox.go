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
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/fleetmux/fleetmux/api"
)

// Verb is the hidden first argument that makes a binary linking this package
// the wrapper.
const Verb = "sandbox-exec"

// FD is the child's file descriptor the wrapper reads its Spec from (the
// session's nonce and guard channel use 3 and 4).
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

// Wrap returns the argv that runs argv under spec, and the read end of the pipe
// that carries spec: the caller passes it as the child's fd FD and closes it once
// the child started. self is the wrapper binary ("" for os.Executable).
func Wrap(self string, spec Spec, argv []string) ([]string, *os.File, error) {
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox: own binary: %w", err)
		}
		self = exe
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	if len(b) > 60<<10 {
		return nil, nil, fmt.Errorf("sandbox: spec of %d bytes", len(b))
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	_, err = w.Write(b) // under the pipe's buffer: never blocks
	w.Close()
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("sandbox: spec: %w", err)
	}
	out := append([]string{self, Verb, strconv.Itoa(FD), "--"}, argv...)
	return out, r, nil
}

func init() {
	if len(os.Args) > 4 && os.Args[1] == Verb && os.Args[3] == "--" {
		fd, err := strconv.Atoi(os.Args[2])
		if err == nil {
			err = run(fd, os.Args[4:])
		}
		// run returns only on failure: the program never ran.
		fmt.Fprintf(os.Stderr, "fleetmux: sandbox: %v\r\n", err)
		os.Exit(126)
	}
}
