package holder

import (
	"os"

	"golang.org/x/sys/unix"
)

// awaitExit blocks until the child pid has exited (it is not reaped: the caller's
// cmd.Wait does that, at once). It waits on the runtime's poller through a pidfd:
// a goroutine blocked in wait4 holds an OS thread, with its stacks, for the
// session's whole life. Without pidfds (Linux before 5.3) it returns at once and
// cmd.Wait blocks as before. (session/reap.go has the same: holder imports no
// session code.)
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
