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
