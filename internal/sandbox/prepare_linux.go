package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
)

// A prepared namespace (Prepare) is the mount namespace mask makes, made once
// for many wrappers: a wrapper that joins it (Spec.Prepared) makes none of its
// own, so no namespace is copied, masked and torn down per program. It is made
// by a wrapper started for it alone, which masks the hidden paths as mask does,
// reports its thread and the marks of what it hid, and exits once the node has
// opened the namespace (an open nsfs file keeps a namespace alive).

// prepareWait bounds the wait for the preparing wrapper.
const prepareWait = 10 * time.Second

// Prepare makes a mount namespace that hides the paths in hide as mask does
// (nothing bound back), with self as the wrapper ("" for os.Executable). It
// needs root and Landlock (which keeps the mounts in place for the programs
// that join it); elsewhere it fails with ErrUnsupported. Close the namespace
// when done.
func Prepare(self string, hide []string) (*Namespace, error) {
	if unix.Geteuid() != 0 || ABI() < 1 || !canMask() {
		return nil, fmt.Errorf("%w: a prepared namespace needs root and Landlock", ErrUnsupported)
	}
	hide = topHidden(hide)
	if len(hide) == 0 {
		return nil, errors.New("sandbox: nothing to hide")
	}
	// Watched from before the namespace is copied: a change of the node's mount
	// table from then on makes it stale. Opened raw: in Go's poller, its epoll
	// would take the change's event before changed polls for it.
	fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: mount table: %w", err)
	}
	mounts := rawFile{fd}
	ns := &Namespace{hide: hide, mounts: mounts, host: make([]hostStat, len(hide))}
	for i, h := range hide {
		ns.host[i] = statHost(h)
	}
	w, err := Wrap(self, Spec{Hide: hide, Mask: true, Prepare: true}, nil)
	if err != nil {
		mounts.Close()
		return nil, err
	}
	defer w.Close()
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = append(make([]*os.File, FD-3), w.Child...)
	hold, err := cmd.StdinPipe() // it exits when this closes
	if err != nil {
		mounts.Close()
		return nil, err
	}
	defer hold.Close()
	if err := cmd.Start(); err != nil {
		mounts.Close()
		return nil, fmt.Errorf("sandbox: prepare: %w", err)
	}
	w.CloseChild()
	f, marks, err := readPrepared(w.done, cmd.Process.Pid)
	hold.Close()
	werr := waitBounded(cmd)
	if err != nil {
		mounts.Close()
		return nil, err
	}
	if werr != nil {
		f.Close()
		mounts.Close()
		return nil, fmt.Errorf("sandbox: prepare: %w", werr)
	}
	ns.f, ns.marks = f, marks
	return ns, nil
}

// readPrepared reads the preparing wrapper's report (its thread and marks) and
// opens the namespace of that thread of process pid.
func readPrepared(done *os.File, pid int) (*os.File, []Mark, error) {
	_ = done.SetReadDeadline(time.Now().Add(prepareWait))
	line, err := bufio.NewReaderSize(done, 64<<10).ReadString('\n')
	if rest, ok := strings.CutPrefix(line, readyMark); ok && err == nil {
		var r prepared
		if err := json.Unmarshal([]byte(rest), &r); err != nil {
			return nil, nil, fmt.Errorf("sandbox: prepare: %w", err)
		}
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(r.TID) + "/ns/mnt")
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox: prepare: %w", err)
		}
		var own, got unix.Stat_t
		if unix.Stat("/proc/self/ns/mnt", &own) != nil || unix.Fstat(int(f.Fd()), &got) != nil || own.Ino == got.Ino {
			f.Close()
			return nil, nil, errors.New("sandbox: prepare: the wrapper's namespace is not a new one")
		}
		return f, r.Marks, nil
	}
	if line != "" {
		return nil, nil, fmt.Errorf("sandbox: prepare: %s", strings.TrimSpace(strings.TrimPrefix(line, unsupportedMark)))
	}
	return nil, nil, fmt.Errorf("sandbox: prepare: the wrapper did not report: %v", err)
}

// waitBounded waits for cmd, killing it past prepareWait.
func waitBounded(cmd *exec.Cmd) error {
	t := time.AfterFunc(prepareWait, func() { _ = cmd.Process.Kill() })
	defer t.Stop()
	return cmd.Wait()
}

// readyMark starts the report of a preparing wrapper: JSON of prepared, a newline.
const readyMark = "prepared: "

// prepared is what a preparing wrapper reports.
type prepared struct {
	TID   int    `json:"tid"`
	Marks []Mark `json:"marks"`
}

// prepareHere is the preparing wrapper: it masks spec.Hide in a namespace of
// this thread's own, reports, and waits until its stdin closes. It returns only
// on failure.
func prepareHere(spec *Spec) error {
	if !canMask() || ABI() < 1 {
		return fmt.Errorf("%w: no mounts to hide paths with here", ErrUnsupported)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := mask(spec.Hide, nil); err != nil {
		return err
	}
	marks, err := markHidden(spec.Hide)
	if err != nil {
		return err
	}
	b, err := json.Marshal(prepared{TID: unix.Gettid(), Marks: marks})
	if err != nil {
		return err
	}
	if _, err := unix.Write(FD+1, []byte(readyMark+string(b)+"\n")); err != nil {
		return err
	}
	var buf [1]byte
	for {
		n, err := unix.Read(0, buf[:])
		if n <= 0 && err != unix.EINTR {
			os.Exit(0)
		}
	}
}

// markHidden is how each hidden path looks in this (masked) namespace.
func markHidden(hide []string) ([]Mark, error) {
	var marks []Mark
	for _, h := range topHidden(hide) {
		var st unix.Stat_t
		err := unix.Lstat(h, &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			marks = append(marks, Mark{Path: h, Kind: markNone})
		case err != nil:
			return nil, fmt.Errorf("hide %s: %w", h, err)
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			marks = append(marks, Mark{Path: h, Kind: markDir, Dev: st.Dev})
		case st.Mode&unix.S_IFMT == unix.S_IFCHR:
			marks = append(marks, Mark{Path: h, Kind: markFile, Dev: st.Rdev})
		default:
			return nil, fmt.Errorf("hide %s: not masked", h)
		}
	}
	return marks, nil
}

// join moves this thread into the prepared namespace at fd FD+2 and checks
// that every hidden path there still looks as marks say (the tmpfs made for
// it, /dev/null, or nothing); then it changes to the working directory again
// (a namespace's is its root), refusing one below a hidden path as mask does.
// errNoJoin: the namespace could not be joined or no longer hides what it hid;
// the caller masks instead (from a copy of whichever namespace it is in).
func join(hide []string, marks []Mark) error {
	wd, err := unix.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	// setns refuses a thread that shares its filesystem context (every Go thread).
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("%w: %v", errNoJoin, err)
	}
	if err := unix.Setns(FD+2, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("%w: %v", errNoJoin, err)
	}
	unix.Close(FD + 2)
	if err := unix.Chdir(wd); err != nil {
		return fmt.Errorf("working directory %s: %w", wd, err)
	}
	// What it hides must be what the spec hides, still covered.
	if !slices.Equal(topHidden(hide), marksPaths(marks)) {
		return fmt.Errorf("%w: it hides other paths", errNoJoin)
	}
	for _, m := range marks {
		if !m.holds() {
			return fmt.Errorf("%w: %s is no longer hidden there", errNoJoin, m.Path)
		}
	}
	for _, h := range hide {
		if api.PathUnder(wd, h) {
			return fmt.Errorf("working directory %s is in the hidden %s", wd, h)
		}
	}
	return nil
}

// errNoJoin: a prepared namespace could not be used (the wrapper masks instead).
var errNoJoin = errors.New("prepared namespace")

// holds reports whether m's path looks as it did when the namespace was made.
func (m Mark) holds() bool {
	var st unix.Stat_t
	err := unix.Lstat(m.Path, &st)
	switch m.Kind {
	case markNone:
		return errors.Is(err, unix.ENOENT)
	case markDir:
		return err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Dev == m.Dev
	case markFile:
		return err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == m.Dev
	}
	return false
}

// dupFile is a close-on-exec duplicate of f (nil on failure).
func dupFile(f *os.File) *os.File {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// isNS reports whether fd is an open namespace file.
func isNS(fd int) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(fd, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// rawFile is a file descriptor kept out of Go's poller.
type rawFile struct{ fd int }

func (f rawFile) Close() error { return unix.Close(f.fd) }

// hostStat is a hidden path as the node sees it: its inode, or absent.
type hostStat struct {
	dev, ino uint64
	absent   bool
}

func statHost(p string) hostStat {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return hostStat{absent: true}
	}
	return hostStat{dev: st.Dev, ino: st.Ino}
}

// changed reports whether the node's mount table changed since the namespace
// was prepared, or a hidden path is another one now (made, removed, replaced):
// the namespace no longer shows what a namespace made now would.
func (ns *Namespace) changed() bool {
	fds := []unix.PollFd{{Fd: int32(ns.mounts.fd), Events: unix.POLLPRI}}
	if n, err := unix.Poll(fds, 0); err != nil || (n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0) {
		ns.moved.Store(true) // the event is reported once
	}
	if ns.moved.Load() {
		return true
	}
	for i, h := range ns.hide {
		if statHost(h) != ns.host[i] {
			return true
		}
	}
	return false
}
