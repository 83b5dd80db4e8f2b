package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
)

// run is the wrapper: it applies the Spec read from fd to this thread (and the
// process's credentials) and execve's argv from this thread, whose Landlock
// domain, namespace, seccomp filter and no_new_privs the program inherits. It
// returns only on failure.
func run(fd int, argv []string) error {
	runtime.LockOSThread() // never unlocked: the exec happens on this thread
	unix.CloseOnExec(FD + 1)
	if isNS(FD + 2) {
		unix.CloseOnExec(FD + 2)
	}
	if len(argv) == 0 {
		warmSpec() // a spare's: done while it waits
	}
	b, err := readSpec(fd)
	if err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	var spec Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	if spec.Prepare {
		return prepareHere(&spec)
	}
	if len(argv) == 0 { // started by Later: the program comes with the spec
		argv = spec.Argv
		if len(argv) == 0 || argv[0] == "" {
			return errors.New("spec without a program")
		}
		if spec.Dir != "" {
			if err := unix.Chdir(spec.Dir); err != nil {
				return fmt.Errorf("chdir %s: %w", spec.Dir, err)
			}
		}
		if spec.Env != nil {
			os.Clearenv()
			for _, kv := range spec.Env {
				if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
					_ = os.Setenv(k, v)
				}
			}
		}
	}
	p := spec.Profile
	if p != nil {
		if err := p.Validate(); err != nil {
			return err
		}
		if lim := p.Limits; lim != (api.SandboxLimits{}) {
			if err := joinCgroup(spec.Cgroup, lim); err != nil {
				return err
			}
		}
		if p.Network.Mode == api.NetworkNone {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("%w: network namespace: %v", ErrUnsupported, err)
			}
		}
	}
	masked := false
	if spec.Mask && (!canMask() || ABI() < 1) {
		return fmt.Errorf("%w: no mounts to hide paths with here", ErrUnsupported)
	}
	if len(spec.Hide) > 0 && canMask() && ABI() > 0 {
		err := errNoJoin
		if len(spec.Prepared) > 0 && isNS(FD+2) {
			err = join(spec.Hide, spec.Prepared)
		}
		if errors.Is(err, errNoJoin) {
			err = mask(spec.Hide, spec.Write)
		}
		if err != nil {
			return err
		}
		masked = true
	}
	// The ambient CAP_SYS_ADMIN of Unprivileged's namespace was for the mounts.
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	if err := restrict(&spec, masked); err != nil {
		return err
	}
	if p != nil {
		if err := denyUserNS(); err != nil {
			return err
		}
		// No capabilities survive the exec, even for root.
		for c := 0; c <= 63; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err == unix.EINVAL {
				break
			}
		}
		_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	}
	if spec.Cred {
		_ = unix.Fchown(0, int(spec.UID), -1) // its terminal, when stdin is one
		groups := make([]int, len(spec.Groups))
		for i, g := range spec.Groups {
			groups[i] = int(g)
		}
		if err := syscall.Setgroups(groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(int(spec.GID)); err != nil {
			return fmt.Errorf("setgid: %w", err)
		}
		if err := syscall.Setuid(int(spec.UID)); err != nil {
			return fmt.Errorf("setuid: %w", err)
		}
	}
	// A bare name is looked up in the program's PATH, as execvp does.
	path := argv[0]
	if !strings.Contains(path, "/") {
		if p, err := exec.LookPath(path); err == nil {
			path = p
		}
	}
	if err := unix.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("%w: exec %s: %w", ErrProgram, argv[0], err)
	}
	return nil
}

// readSpec reads fd to its end (at most maxSpec bytes and a little), blocking
// this thread: the wrapper that waits for its spec wakes on it directly, not
// through Go's poller and a hand-off to this locked thread.
func readSpec(fd int) ([]byte, error) {
	defer unix.Close(fd)
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 4096)
	for len(b) <= maxSpec {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, err
		case n == 0:
			return b, nil
		}
		b = b[:len(b)+n]
	}
	return nil, fmt.Errorf("spec over %d bytes", maxSpec)
}

// warmSpec decodes a Spec with every part once: the decoder's reflection of
// the types is then done before the spec comes.
func warmSpec() {
	b, err := json.Marshal(Spec{Profile: &api.SandboxProfile{Network: api.SandboxNetwork{Ports: []int{1}}}, Prepared: []Mark{{}}, Argv: []string{""}, Env: []string{""}, Groups: []uint32{0}})
	if err == nil {
		_ = json.Unmarshal(b, new(Spec))
	}
}

// denyUserNS installs a seccomp filter on this thread: creating a user namespace
// (clone, unshare with CLONE_NEWUSER) fails with EPERM, clone3 with ENOSYS (its
// flags are behind a pointer; libc falls back to clone). Another architecture's
// system calls are refused.
func denyUserNS() error {
	if auditArch == 0 {
		return fmt.Errorf("%w: no seccomp filter for %s", ErrUnsupported, runtime.GOARCH)
	}
	const (
		ldW   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq   = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset  = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		jge   = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret   = unix.BPF_RET | unix.BPF_K
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enos  = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	prog := []unix.SockFilter{
		{Code: ldW, K: 4}, // arch
		{Code: jeq, K: auditArch, Jt: 1},
		{Code: ret, K: unix.SECCOMP_RET_KILL_PROCESS},
		{Code: ldW, K: 0},                 // nr
		{Code: jge, K: 0x40000000, Jt: 6}, // x32's numbers: refused
		{Code: jeq, K: uint32(unix.SYS_CLONE3), Jf: 1},
		{Code: ret, K: enos},
		{Code: jeq, K: uint32(unix.SYS_UNSHARE), Jt: 1},
		{Code: jeq, K: uint32(unix.SYS_CLONE), Jf: 3},
		{Code: ldW, K: 16}, // args[0], low 32 bits (little-endian)
		{Code: jset, K: unix.CLONE_NEWUSER, Jf: 1},
		{Code: ret, K: eperm},
		{Code: ret, K: allow},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("%w: seccomp: %v", ErrUnsupported, err)
	}
	return nil
}
