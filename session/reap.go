package session

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// dupConn is a copy of c's socket as a file, leaving the socket non-blocking:
// (*net.UnixConn).File puts the shared socket in blocking mode, and our reads of it
// then hold an OS thread each (a session in a holder with a guard did).
func dupConn(c *net.UnixConn) (*os.File, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), "guard"), nil
}

// awaitExit blocks until the child pid has exited (it is not reaped: the caller's
// cmd.Wait does that, at once). It waits on the runtime's poller through a pidfd:
// a goroutine blocked in wait4 holds an OS thread, with its stacks, for the
// session's whole life (100 idle sessions were 100 threads). Without pidfds
// (Linux before 5.3) it returns at once and cmd.Wait blocks as before.
func awaitExit(pid int) {
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
