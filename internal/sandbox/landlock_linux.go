package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
)

// Landlock, by raw system calls on the calling thread only: the wrapper execs
// from that thread, so the program inherits the domain, and no other thread of
// the short-lived wrapper matters (go-landlock's all-threads enforcement needs
// libpsx, which wraps pthread_create in every binary that links it).

const (
	fsRead  = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	fsFiles = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// devices every confined program may read and write (and ioctl): its terminal
// and the usual sinks and sources.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts"}

type rulesetAttr struct{ fs, net, scoped uint64 }

type netPortAttr struct {
	allowed uint64
	port    uint64
}

// ABI is the kernel's Landlock ABI version, 0 without Landlock.
func ABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// fsAll is every filesystem right the ABI knows that the ruleset handles.
func fsAll(abi int) uint64 {
	all := uint64(unix.LANDLOCK_ACCESS_FS_MAKE_SYM<<1 - 1) // ABI 1: execute … make_sym
	if abi >= 2 {
		all |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		all |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		all |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return all
}

// restrict builds spec's ruleset and enforces it on this thread. Without a
// profile and without Hide it does nothing; without Landlock, a profile is
// ErrUnsupported and Hide alone is skipped (the caller refuses to start such a
// session where that matters). masked says Hide is already covered by mounts
// (mask): the domain then only has to keep them in place, and the rest of the
// filesystem is not expanded around the hidden paths.
func restrict(spec *Spec, masked bool) error {
	p := spec.Profile
	if p == nil && len(spec.Hide) == 0 {
		return nil
	}
	abi := ABI()
	if abi == 0 {
		if p != nil {
			return fmt.Errorf("%w: no Landlock", ErrUnsupported)
		}
		return nil
	}
	all := fsAll(abi)
	attr := rulesetAttr{fs: all}
	size := unsafe.Sizeof(uint64(0)) * 2
	var reads, writes, hide []string
	if !masked {
		hide = append(hide, spec.Hide...)
	}
	writes = append(writes, spec.Write...)
	if p == nil {
		writes = append(writes, "/") // everything but Hide
	} else {
		hide = append(hide, p.Files.Hide...)
		reads = append(reads, p.Files.Read...)
		writes = append(writes, p.Files.Write...)
		if p.Files.Rest != api.RestHide {
			reads = append(reads, "/")
		}
		switch p.Network.Mode {
		case api.NetworkTCP, api.NetworkNone:
			if abi < 4 {
				if p.Network.Mode == api.NetworkTCP {
					return fmt.Errorf("%w: TCP port rules need Landlock ABI 4 (kernel has %d)", ErrUnsupported, abi)
				}
			} else {
				attr.net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
			}
		}
		if abi >= 6 {
			attr.scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
			size = unsafe.Sizeof(attr)
		}
	}
	rfd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return fmt.Errorf("%w: landlock ruleset: %v", ErrUnsupported, e)
	}
	fd := int(rfd)
	defer unix.Close(fd)
	for _, r := range reads {
		if err := grant(fd, r, fsRead, hide, true); err != nil {
			return err
		}
	}
	for _, w := range writes {
		if err := grant(fd, w, all, hide, true); err != nil {
			return err
		}
	}
	if p != nil {
		for _, d := range devices {
			if err := grant(fd, d, all&(fsFiles|fsRead|unix.LANDLOCK_ACCESS_FS_WRITE_FILE), nil, false); err != nil {
				return err
			}
		}
		if p.Network.Mode == api.NetworkTCP {
			for _, port := range p.Network.Ports {
				na := netPortAttr{allowed: unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, port: uint64(port)}
				if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(fd), 2 /* LANDLOCK_RULE_NET_PORT */, uintptr(unsafe.Pointer(&na)), 0, 0, 0); e != 0 {
					return fmt.Errorf("landlock port %d: %v", port, e)
				}
			}
		}
	}
	var flags uintptr
	// Without CAP_SYS_ADMIN Landlock needs no_new_privs; a root wrapper leaves
	// it off without a profile, so set-user-ID programs (sudo) keep working in
	// sessions that only have the data dir hidden (they stay in the domain).
	if p != nil || unix.Geteuid() != 0 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), flags, 0); e != 0 {
		return fmt.Errorf("%w: landlock restrict: %v", ErrUnsupported, e)
	}
	return nil
}

// grant allows rights beneath path, minus the paths in hide strictly below it:
// Landlock only allows, so such a path's ancestors are granted entry by entry,
// leaving out the one on the way to the hidden path. A listed path is granted
// even below a hidden one; an entry found while expanding is not. A path that
// does not exist is skipped. Entries made later in an expanded directory are not
// granted.
func grant(fd int, path string, rights uint64, hide []string, listed bool) error {
	if !listed && slices.ContainsFunc(hide, func(h string) bool { return api.PathUnder(path, h) }) {
		return nil
	}
	inside := slices.ContainsFunc(hide, func(h string) bool { return h != path && api.PathUnder(h, path) })
	if inside {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil // not a directory we can list: nothing of it is granted
		}
		for _, e := range ents {
			if err := grant(fd, filepath.Join(path, e.Name()), rights, hide, false); err != nil {
				return err
			}
		}
		return nil
	}
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= fsFiles
	}
	pb := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(pfd)}
	if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(fd), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&pb)), 0, 0, 0); e != 0 {
		return fmt.Errorf("landlock rule %s: %v", path, e)
	}
	return nil
}
