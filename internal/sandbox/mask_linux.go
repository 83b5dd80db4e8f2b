package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
)

// canMask reports whether this process may hide paths by mounting over them in
// a mount namespace of its own: it has CAP_SYS_ADMIN (root; or the user
// namespace Unprivileged makes).
func canMask() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_SYS_ADMIN) != 0
}

// Unprivileged sets attr up for a wrapper that a user without root starts to
// hide paths (Spec.Hide): the wrapper runs in a user namespace of its own that
// maps only the user's own uid and gid, with CAP_SYS_ADMIN in it (ambient) for
// its mounts; it drops it before the program runs, which then has no
// capability. Files of other users show there as owned by nobody. For root,
// or with attr.Credential, it does nothing.
func Unprivileged(attr *syscall.SysProcAttr) {
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 || attr.Credential != nil {
		return
	}
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	attr.GidMappingsEnableSetgroups = false
	attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_SYS_ADMIN)
}

// mask hides the paths in hide from this thread and the program it execs: it
// moves into a new mount namespace (its mounts no longer propagate back) and
// mounts an empty read-only tmpfs over each hidden directory and /dev/null
// (read-only) over each hidden file. The paths in keep that lie below a hidden
// directory are bound back in place (opened before the mask), so they stay
// usable. Afterwards the working directory is looked up again: one below a
// hidden path is refused (the old one would lead into what is hidden).
//
// Unlike Landlock's allow-list, this leaves the rest of the filesystem as it
// is, including entries made later next to the hidden ones. The mounts hold
// only as long as the program cannot unmount them or reach the original mount
// namespace: the caller enforces a Landlock domain afterwards (which forbids
// mount, umount and access to /proc/PID/root and /proc/PID/ns of processes
// outside it).
func mask(hide, keep []string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("%w: mount namespace: %v", ErrUnsupported, err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("mount namespace: %w", err)
	}
	wd, err := unix.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	hide = slices.Clone(hide)
	slices.Sort(hide)
	for i, h := range hide {
		// A path below another hidden one is hidden with it.
		if slices.ContainsFunc(hide[:i], func(o string) bool { return api.PathUnder(h, o) }) {
			continue
		}
		if err := maskOne(h, keep); err != nil {
			return err
		}
	}
	if err := unix.Chdir(wd); err != nil {
		return fmt.Errorf("working directory %s: %w", wd, err)
	}
	for _, h := range hide {
		if api.PathUnder(wd, h) && !slices.ContainsFunc(keep, func(k string) bool { return api.PathUnder(wd, k) }) {
			return fmt.Errorf("working directory %s is in the hidden %s", wd, h)
		}
	}
	return nil
}

// maskOne mounts over one hidden path h, binding back the paths of keep below it.
func maskOne(h string, keep []string) error {
	var st unix.Stat_t
	if err := unix.Lstat(h, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // nothing to hide
		}
		return fmt.Errorf("hide %s: %w", h, err)
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Mount("/dev/null", h, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
		if err := unix.Mount("", h, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|flags, ""); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
		return nil
	}
	// Open what stays before it is covered.
	type kept struct {
		rel string
		fd  int
		dir bool
	}
	var ks []kept
	defer func() {
		for _, k := range ks {
			unix.Close(k.fd)
		}
	}()
	for _, k := range keep {
		if k == h || !api.PathUnder(k, h) {
			continue
		}
		fd, err := unix.Open(k, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue // not there: nothing to keep
		}
		var kst unix.Stat_t
		if err := unix.Fstat(fd, &kst); err != nil {
			unix.Close(fd)
			continue
		}
		ks = append(ks, kept{rel: strings.TrimPrefix(k, h+"/"), fd: fd, dir: kst.Mode&unix.S_IFMT == unix.S_IFDIR})
	}
	if err := unix.Mount("tmpfs", h, "tmpfs", flags, "mode=0755,size=64k,nr_inodes=256"); err != nil {
		return fmt.Errorf("hide %s: %w", h, err)
	}
	for _, k := range ks {
		at := filepath.Join(h, k.rel)
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			return fmt.Errorf("keep %s: %w", at, err)
		}
		if k.dir {
			err := unix.Mkdir(at, 0o755)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("keep %s: %w", at, err)
			}
		} else {
			fd, err := unix.Open(at, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return fmt.Errorf("keep %s: %w", at, err)
			}
			unix.Close(fd)
		}
		if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(k.fd), at, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("keep %s: %w", at, err)
		}
	}
	if err := unix.Mount("", h, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("hide %s: %w", h, err)
	}
	return nil
}

// CanHide reports whether this process can start wrappers that hide paths by
// mounts (mask): as root, where the kernel has Landlock (which keeps the mounts
// in place); without root, also only when a wrapper started with Unprivileged
// does it here, which it tries once (a kernel or security module may refuse
// user namespaces or mounts in them).
func CanHide() bool {
	if ABI() < 1 {
		return false
	}
	if unix.Geteuid() == 0 {
		return true
	}
	return tryHide() == nil
}

// tryHide starts a wrapper with Unprivileged that hides a directory from true.
func tryHide() error {
	dir, err := os.MkdirTemp("", "fleetmux-hide-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tru, err := exec.LookPath("true")
	if err != nil {
		tru = "/bin/true"
	}
	w, err := Wrap("", Spec{Hide: []string{dir}, Mask: true}, []string{tru})
	if err != nil {
		return err
	}
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.ExtraFiles = append([]*os.File{nil, nil}, w.Child...)
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	Unprivileged(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		w.CloseChild()
		return err
	}
	werr := w.Wait(10 * time.Second)
	if err := cmd.Wait(); werr == nil && err != nil {
		werr = err
	}
	return werr
}
