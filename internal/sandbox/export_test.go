package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WrapJoining is WrapIn without Fits: the wrapper is told to join ns whatever
// the node would check first (a check that raced a change).
func WrapJoining(ns *Namespace, spec Spec, argv []string) (*Wrapped, error) {
	spec.Prepared = ns.marks
	w, err := Wrap("", spec, argv)
	if err != nil {
		return nil, err
	}
	w.Child = append(w.Child, ns.dup())
	return w, nil
}

// OOMKills is how many processes the kernel's OOM killer has killed in the
// session group name (memory.oom_control's oom_kill under v1, memory.events'
// under v2), -1 when the group or the counter is not there.
func OOMKills(name string) int {
	file, key := filepath.Join(cgroupRoot, "memory", group, name, "memory.oom_control"), "oom_kill"
	if CgroupVersion() == 2 {
		file = filepath.Join(cgroupRoot, group, name, "memory.events")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return -1
}

// GroupProcs is the cgroup.procs file of session group name under controller's
// hierarchy (v1; the unified one under v2).
func GroupProcs(controller, name string) string {
	if CgroupVersion() == 2 {
		return filepath.Join(cgroupRoot, group, name, "cgroup.procs")
	}
	return filepath.Join(cgroupRoot, controller, group, name, "cgroup.procs")
}
