package session

import (
	"os"
	"strconv"
)

// Reader returns the process of the session's foreground process group that is
// blocked reading the terminal (ok false: none, or the session has exited). It
// reads the kernel's state now (/proc), as the state sampler does; the node asks
// it before it answers a password prompt, to know which program asks.
func (s *Session) Reader() (pid int, ok bool) {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited {
		return 0, false
	}
	pg, err := foregroundPgrp(s.master)
	if err != nil || pg <= 0 {
		return 0, false
	}
	for _, p := range descendants(s.pid) {
		if st, ok := readStat(p); ok && st.pgrp == pg && procWaitingForInput(p, s.tty) {
			return p, true
		}
	}
	return 0, false
}

// SoleReader reports whether pid is the only process that can read the session's
// terminal now, as the kernel says (/proc, every process on the host, not only the
// shell's descendants: a process a subshell left behind is reparented away from
// the shell but keeps its process group):
//
//   - the terminal's foreground process group (tcgetpgrp on the master) is pid's,
//     and pid is its only live member (a zombie reads nothing; a stopped member
//     counts: it can be continued);
//   - no process of the session in another process group is blocked reading the
//     terminal (or polling it): job control stops a read a background process
//     starts (SIGTTIN, or EIO), not one it started in the foreground and still
//     waits in (a process left by an earlier job, or one that left the group);
//   - no process outside the terminal's session holds the terminal open (the
//     terminal's job control does not stop its reads). The node's own process is
//     not counted: it opens the terminal only to count queued input.
//
// The foreground group is scanned last, and the
// foreground group read again after it, to keep the window small; it is not
// closed: a process of the session can join the foreground group (setpgid) or make
// its own the foreground (tcsetpgrp with SIGTTOU ignored) between this answer and
// what the caller writes next. It reads the whole process table; callers ask it
// once, right before they write.
func (s *Session) SoleReader(pid int) bool {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited || pid <= 0 {
		return false
	}
	pg, err := foregroundPgrp(s.master)
	if err != nil || pg <= 0 {
		return false
	}
	own, ok := readStat(pid)
	if !ok || own.pgrp != pg || dead(own) {
		return false
	}
	pids := allProcesses()
	if pids == nil {
		return false
	}
	self := os.Getpid()
	for _, p := range pids {
		st, ok := readStat(p)
		if !ok || p == pid || p == self || dead(st) || st.pgrp == pg {
			continue
		}
		if st.sid == own.sid {
			// Job control stops a read the process starts, not one in progress:
			// a read begun in the foreground goes on in the background.
			if procWaitingForInput(p, s.tty) {
				return false
			}
		} else if holdsTerminal(p, s.tty) {
			return false
		}
	}
	for _, p := range allProcesses() {
		if p == pid {
			continue
		}
		if st, ok := readStat(p); ok && st.pgrp == pg && !dead(st) {
			return false
		}
	}
	again, err := foregroundPgrp(s.master)
	return err == nil && again == pg
}

// dead reports whether a process is a zombie (or being reaped): it reads nothing.
func dead(st procStat) bool { return st.state == 'Z' || st.state == 'X' }

// allProcesses lists the pids in /proc (nil: /proc unreadable).
func allProcesses() []int {
	f, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if p, err := strconv.Atoi(n); err == nil && p > 0 {
			pids = append(pids, p)
		}
	}
	return pids
}

// holdsTerminal reports whether pid has an fd open on the terminal tty (by its
// path: /dev/tty of a process outside the session is that process's own terminal).
// A process whose fds cannot be listed counts as holding it.
func holdsTerminal(pid int, tty string) bool {
	base := "/proc/" + strconv.Itoa(pid) + "/fd"
	f, err := os.Open(base)
	if err != nil {
		return !os.IsNotExist(err) // gone: holds nothing; unreadable: assume it does
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return true
	}
	for _, n := range names {
		if link, err := os.Readlink(base + "/" + n); err == nil && link == tty {
			return true
		}
	}
	return false
}
