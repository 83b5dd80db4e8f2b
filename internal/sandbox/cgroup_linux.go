package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
)

// cgroupRoot is where cgroups are mounted; group is fleetmux's group under each
// hierarchy (v1) or the unified one (v2).
const (
	cgroupRoot = "/sys/fs/cgroup"
	group      = "fleetmux"
	// sweepAfter: an empty session group older than this is removed by the next
	// confined start (the wrapper execs, so nobody is left to remove its own).
	sweepAfter = 10 * time.Second
)

// CgroupVersion is the cgroup version usable for limits (1 or 2), 0 for none:
// v2 when the unified hierarchy is mounted at /sys/fs/cgroup, v1 when the pids
// and memory hierarchies are; either needs root.
func CgroupVersion() int {
	if os.Geteuid() != 0 {
		return 0
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return 2
	}
	for _, c := range []string{"pids", "memory"} {
		if _, err := os.Stat(filepath.Join(cgroupRoot, c, "cgroup.procs")); err != nil {
			return 0
		}
	}
	return 1
}

// joinCgroup moves this process into a new group name with lim's limits. It
// returns where the process was (origin), for a wrapper that starts the program
// as its child and then leaves the group to it.
func joinCgroup(name string, lim api.SandboxLimits) (origin, error) {
	if err := api.ValidName(name); err != nil {
		return nil, fmt.Errorf("cgroup name: %w", err)
	}
	switch CgroupVersion() {
	case 1:
		return joinV1(name, lim)
	case 2:
		return joinV2(name, lim)
	}
	return nil, fmt.Errorf("%w: no usable cgroups", ErrUnsupported)
}

// origin holds, open for writing, the cgroup.procs file of each group this
// process left when it joined a session group: opened as root before the
// wrapper confines itself (the kernel checks a move against the credentials
// the file was opened with), and closed by an exec.
type origin []int

// openOrigin opens the cgroup.procs of the group this process is in under the
// hierarchy at dir (v1: cgroupRoot/CONTROLLER; v2: cgroupRoot), as
// /proc/self/cgroup names it (its line for controller under v1, the "0::" line
// under v2). It gives -1 when that cannot be done: the wrapper then stays in
// the program's group, as before.
func openOrigin(dir, controller string) int {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return -1
	}
	path, ok := groupPath(b, controller)
	if !ok {
		return -1
	}
	fd, err := unix.Open(filepath.Join(dir, path, "cgroup.procs"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// groupPath finds in /proc/PID/cgroup (lines "ID:CONTROLLERS:PATH") the group
// of controller's v1 hierarchy, or the v2 group ("0::PATH") when controller
// is "": a clean absolute path (no "..": it stays under the hierarchy).
func groupPath(procCgroup []byte, controller string) (string, bool) {
	for _, line := range strings.Split(string(procCgroup), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		if controller == "" && parts[0] != "0" || controller != "" && !slices.Contains(strings.Split(parts[1], ","), controller) {
			continue
		}
		return filepath.Clean(parts[2]), true
	}
	return "", false
}

// leave moves this process back to the groups it came from ("0": the writer),
// leaving the session group to the program it started, and closes the files:
// the wrapper that stays holds nothing. Best effort: a wrapper that stays in
// the group only counts against the program's limits.
func (o origin) leave() {
	zero := []byte("0")
	for _, fd := range o {
		if fd >= 0 {
			_, _ = unix.Write(fd, zero)
			_ = unix.Close(fd)
		}
	}
}

type setting struct{ file, value string }

func joinV1(name string, lim api.SandboxLimits) (origin, error) {
	ctl := map[string][]setting{}
	if lim.Pids > 0 {
		ctl["pids"] = append(ctl["pids"], setting{"pids.max", strconv.Itoa(lim.Pids)})
	}
	if lim.MemoryBytes > 0 {
		m := strconv.FormatInt(lim.MemoryBytes, 10)
		ctl["memory"] = append(ctl["memory"], setting{"memory.limit_in_bytes", m}, setting{"memory.memsw.limit_in_bytes", m})
	}
	if lim.CPU > 0 {
		ctl["cpu"] = append(ctl["cpu"], setting{"cpu.cfs_period_us", "100000"},
			setting{"cpu.cfs_quota_us", strconv.Itoa(max(int(lim.CPU*100000), 1000))})
	}
	var from origin
	for c, sets := range ctl {
		base := filepath.Join(cgroupRoot, c, group)
		if err := os.MkdirAll(base, 0o755); err != nil {
			return from, fmt.Errorf("%w: cgroup %s: %v", ErrUnsupported, c, err)
		}
		sweep(base)
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return from, fmt.Errorf("cgroup %s: %w", c, err)
		}
		for _, s := range sets {
			err := os.WriteFile(filepath.Join(dir, s.file), []byte(s.value), 0)
			if err != nil && !(s.file == "memory.memsw.limit_in_bytes" && os.IsNotExist(err)) { // no swap accounting
				return from, fmt.Errorf("cgroup %s: %w", s.file, err)
			}
		}
		from = append(from, openOrigin(filepath.Join(cgroupRoot, c), c))
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return from, fmt.Errorf("cgroup %s: join: %w", c, err)
		}
	}
	return from, nil
}

func joinV2(name string, lim api.SandboxLimits) (origin, error) {
	base := filepath.Join(cgroupRoot, group)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("%w: cgroup: %v", ErrUnsupported, err)
	}
	for _, d := range []string{cgroupRoot, base} {
		if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+pids +memory +cpu"), 0); err != nil {
			return nil, fmt.Errorf("%w: cgroup controllers: %v", ErrUnsupported, err)
		}
	}
	sweep(base)
	dir := filepath.Join(base, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var sets []setting
	if lim.Pids > 0 {
		sets = append(sets, setting{"pids.max", strconv.Itoa(lim.Pids)})
	}
	if lim.MemoryBytes > 0 {
		sets = append(sets, setting{"memory.max", strconv.FormatInt(lim.MemoryBytes, 10)}, setting{"memory.swap.max", "0"})
	}
	if lim.CPU > 0 {
		sets = append(sets, setting{"cpu.max", strconv.Itoa(max(int(lim.CPU*100000), 1000)) + " 100000"})
	}
	for _, s := range sets {
		if err := os.WriteFile(filepath.Join(dir, s.file), []byte(s.value), 0); err != nil && !(s.file == "memory.swap.max" && os.IsNotExist(err)) {
			return nil, fmt.Errorf("cgroup %s: %w", s.file, err)
		}
	}
	from := origin{openOrigin(cgroupRoot, "")}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return from, fmt.Errorf("cgroup: join: %w", err)
	}
	return from, nil
}

// sweep removes the empty session groups under base older than sweepAfter
// (rmdir of a group with processes fails: those stay).
func sweep(base string) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && e.IsDir() && time.Since(fi.ModTime()) > sweepAfter {
			_ = os.Remove(filepath.Join(base, e.Name()))
		}
	}
}
