//go:build linux && !amd64

package session

import "golang.org/x/sys/unix"

func syscallClass(nr int) sysClass {
	switch nr {
	case unix.SYS_READ, unix.SYS_READV:
		return sysRead
	case unix.SYS_PSELECT6:
		return sysSelect
	case unix.SYS_PPOLL:
		return sysPoll
	case unix.SYS_EPOLL_PWAIT, unix.SYS_EPOLL_PWAIT2:
		return sysEpoll
	}
	return sysOther
}
