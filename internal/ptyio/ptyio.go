// Package ptyio waits on PTYs and children without holding memory or threads while
// idle: the holder's sessions and the agent's own (package session) both use it.
package ptyio

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// bufSize is the size of a read buffer: the most one Read returns.
const bufSize = 32 << 10

// readBufs are the read buffers of PTY readers, shared by every session of the
// process: a reader takes one only while there is something to read, so an idle
// session holds none (a 32 KiB buffer per session was most of what an idle session
// cost once its ring grew with its output).
var readBufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// Reader reads a non-blocking PTY master through the runtime's poller into
// pooled buffers. It is meant for one goroutine.
type Reader struct {
	rc syscall.RawConn
}

// NewReader reads f, which must be non-blocking.
func NewReader(f *os.File) (*Reader, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &Reader{rc: rc}, nil
}

// Read waits until the master has output, then reads it into a buffer of the pool
// (at most 32 KiB), which the caller gives back with Release. It returns io.EOF at
// the end, and the master's error otherwise (EIO once the terminal's last holder
// closed it, os.ErrClosed after Close).
func (r *Reader) Read() (buf *[]byte, n int, err error) {
	var rerr error
	err = r.rc.Read(func(fd uintptr) bool {
		b := readBufs.Get().(*[]byte)
		for {
			n, rerr = unix.Read(int(fd), *b)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			readBufs.Put(b)
			return false // wait for the poller, holding no buffer
		}
		buf = b
		return true
	})
	if err == nil {
		err = rerr
	}
	n = max(n, 0)
	if err == nil && n == 0 {
		err = io.EOF
	}
	if errors.Is(err, unix.EIO) {
		err = syscall.EIO
	}
	return buf, n, err
}

// Release gives a buffer Read returned back to the pool (nil: nothing).
func Release(buf *[]byte) {
	if buf != nil {
		readBufs.Put(buf)
	}
}

// AwaitExit blocks until the child pid has exited (it is not reaped: the caller's
// cmd.Wait does that, at once). It waits on the runtime's poller through a pidfd:
// a goroutine blocked in wait4 holds an OS thread, with its stacks, for the
// session's whole life (100 idle sessions were 100 threads). Without pidfds (Linux
// before 5.3) it returns at once and cmd.Wait blocks as before.
func AwaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			if err == unix.EINTR {
				continue
			}
			return err != nil || n > 0 // readable: the child exited
		}
	})
}

// ExitCode is the exit code of a child from its cmd.Wait error: its status, or
// 128+N when signal N killed it (as a shell reports it); -1 when it is unknown.
func ExitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			return waitCode(ws)
		}
		return ee.ExitCode()
	}
	return -1
}

// Exited reports whether the child pid has exited, with its exit code as ExitCode
// gives it (128+N for signal N; -1 unknown), without reaping it: its zombie keeps
// the pid, and the process group and session ids it led, from being given to
// another process, so the session's processes can still be signalled by those
// numbers (a reaped shell's pid can belong to anything a moment later). Reap
// releases it. A pid that is not the caller's child (any more) counts as exited,
// code unknown.
func Exited(pid int) (code int, exited bool) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		switch err {
		case unix.EINTR:
			continue
		case unix.ECHILD:
			return -1, true
		case nil:
		default:
			return -1, false
		}
		break
	}
	if info.Signo != int32(unix.SIGCHLD) { // WNOHANG, still running: the kernel left it zeroed
		return 0, false
	}
	status := int(siginfoStatus(&info))
	switch info.Code {
	case cldExited:
		return status, true
	case cldKilled, cldDumped:
		return 128 + status, true
	}
	return -1, true
}

// si_code values of SIGCHLD (CLD_EXITED, CLD_KILLED, CLD_DUMPED).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// siginfoStatus is si_status of a SIGCHLD siginfo: after si_signo, si_errno and
// si_code, the union (aligned to a pointer) starts with si_pid and si_uid, then
// si_status (Linux's siginfo_t; x/sys leaves the union opaque).
func siginfoStatus(info *unix.Siginfo) int32 {
	union := uintptr(12)
	if unsafe.Sizeof(uintptr(0)) == 8 {
		union = 16
	}
	return *(*int32)(unsafe.Add(unsafe.Pointer(info), union+8))
}

// Reap reaps the exited child pid (Exited said so), releasing its pid; it never
// blocks.
func Reap(pid int) {
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != syscall.EINTR {
			return
		}
	}
}

// AwaitExited blocks until the child pid has exited and returns its exit code, as
// Exited, without reaping it (Reap does). It waits on the poller (AwaitExit);
// without pidfds, in waitid.
func AwaitExited(pid int) int {
	AwaitExit(pid)
	for {
		if code, ok := Exited(pid); ok {
			return code
		}
		var info unix.Siginfo // no pidfd: block in waitid until it exits, still unreaped
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil && err != unix.EINTR {
			return -1
		}
	}
}

// waitCode is the exit code of a wait status: the program's status, or 128+N when
// signal N killed it (as a shell reports it); -1 when it did neither.
func waitCode(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return -1
}
