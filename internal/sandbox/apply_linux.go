package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
)

// run is the wrapper: it applies the Spec read from fd to this thread (and the
// process's credentials) and execve's argv from this thread, whose Landlock
// domain, namespace, seccomp filter and no_new_privs the program inherits (or
// starts it as its child: startWait). It returns only on failure.
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
	var from origin
	if p != nil {
		if err := p.Validate(); err != nil {
			return err
		}
		if lim := p.Limits; lim != (api.SandboxLimits{}) {
			if from, err = joinCgroup(spec.Cgroup, lim); err != nil {
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
	// Only in a Landlock domain, which keeps the program from the wrapper's
	// other threads (outside the domain, the namespace and the filter).
	if isPipe(FD+3) && ABI() > 0 {
		return startWait(path, argv, from)
	}
	if err := unix.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("%w: exec %s: %w", ErrProgram, argv[0], err)
	}
	return nil
}

// startWait starts the program as this wrapper's child (from this thread, so
// it inherits the thread's namespace, Landlock domain and seccomp filter; a
// child that is one thread at its exec is quick, where this many-threaded
// process replacing itself is not), reports its end on the status pipe FD+3
// and exits as it did. Before it waits, the wrapper gives up what the program
// does not have: its capabilities (this thread's, the one in the program's
// Landlock domain: a program in a domain cannot trace a thread outside it),
// the fds it holds (the program's 0, 1, 2 and any other it was given, the
// report pipe, the namespace), and its dumpable flag. It returns only when the
// program did not start.
//
// The wrapper's other threads stay outside the program's Landlock domain (and
// mount namespace and seccomp filter: each is a thread's): the domain keeps the
// program from tracing them or reaching their /proc files.
func startWait(path string, argv []string, from origin) error {
	unix.CloseOnExec(FD + 3)
	// The program dies with the wrapper's parent as an exec'd one would: it
	// gets the wrapper's parent-death signal, for the wrapper's death.
	var death int
	_ = unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&death)), 0, 0, 0)
	// Not dumpable: tracing it, or reading its /proc/PID/mem, root, fd, takes
	// CAP_SYS_PTRACE (the program's exec makes the program dumpable again).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.Signal(death)}})
	if err != nil {
		return fmt.Errorf("%w: exec %s: %w", ErrProgram, argv[0], err)
	}
	// The capabilities go after the program started with the wrapper's (a
	// program gaining some at its exec loses its parent-death signal); it
	// cannot trace the wrapper meanwhile, which is not dumpable.
	var none [2]unix.CapUserData
	if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &none[0]); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return fmt.Errorf("capset: %w", err)
	}
	if isNS(FD + 2) {
		_ = unix.Close(FD + 2)
	}
	_ = unix.Close(FD + 1)
	for fd := 0; fd < maxFD; fd++ { // inherited (those the runtime opened are close-on-exec)
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC == 0 && fd != FD+3 {
			_ = unix.Close(fd)
		}
	}
	// The program's group is the program's: this wrapper's threads would count
	// against its pids limit, and the group's OOM killer could pick the
	// wrapper (its whole size counts, not what the group was charged). Last:
	// a move can take milliseconds, and what the wrapper gives up goes first.
	from.leave()
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err != unix.EINTR {
			break
		}
	}
	msg := "x" + strconv.Itoa(ws.ExitStatus())
	if ws.Signaled() {
		msg = "s" + strconv.Itoa(int(ws.Signal()))
	}
	_, _ = unix.Write(FD+3, []byte(msg+"\n"))
	if ws.Signaled() { // the same wait status for a parent that has no status pipe
		var dfl [4]uint64 // a kernel sigaction of zeros: SIG_DFL
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(ws.Signal()), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		_ = unix.Tgkill(os.Getpid(), unix.Gettid(), ws.Signal())
		os.Exit(128 + int(ws.Signal()))
	}
	os.Exit(ws.ExitStatus())
	return nil
}

// maxFD bounds the fds a wrapper that stays closes (its parent gives it FD+3
// and fewer).
const maxFD = 1024

// isPipe reports whether fd is an open pipe.
func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
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
