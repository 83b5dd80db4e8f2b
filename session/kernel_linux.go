//go:build linux

package session

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// This file reads the session's state from the kernel: which process group is in the
// foreground of the PTY, whether any of its tasks is blocked reading the terminal, and
// the terminal's echo flag. Everything here reads /proc; nothing blocks for long and
// nothing is cached, so callers decide how often to sample.

// syscall classes that mean "waiting for input" when the terminal is among the fds.
type sysClass int

const (
	sysOther  sysClass = iota
	sysRead            // fd in arg0
	sysSelect          // nfds arg0, readfds arg1
	sysPoll            // fds arg0, nfds arg1
	sysEpoll           // epfd arg0
)

// masterControl runs f with the master's fd without switching it to blocking mode.
func masterControl(master *os.File, f func(fd int) error) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// foregroundPgrp is tcgetpgrp on the master: the PTY's foreground process group.
func foregroundPgrp(master *os.File) (int, error) {
	var pg int
	err := masterControl(master, func(fd int) (err error) {
		pg, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return pg, err
}

// terminalEcho reports the ECHO flag of the PTY (the master shares the slave's termios).
func terminalEcho(master *os.File) (bool, error) {
	var echo bool
	err := masterControl(master, func(fd int) error {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return err
		}
		echo = t.Lflag&unix.ECHO != 0
		return nil
	})
	return echo, err
}

// outputQueued is the number of bytes the programs wrote to the terminal that the
// master's reader has not read yet (TIOCINQ on the master).
func outputQueued(master *os.File) (int, error) {
	var n int
	err := masterControl(master, func(fd int) (err error) {
		n, err = unix.IoctlGetInt(fd, unix.TIOCINQ)
		return err
	})
	return n, err
}

// inputQueued is the number of bytes typed into the terminal that no program has read
// yet (TIOCINQ on the slave side).
func inputQueued(tty string) (int, error) {
	fd, err := unix.Open(tty, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return unix.IoctlGetInt(fd, unix.TIOCINQ)
}

// procStat holds the fields of /proc/PID/stat we use.
type procStat struct {
	state byte
	ppid  int
	pgrp  int
	sid   int
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// comm may contain spaces and parens: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 4 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	sid, _ := strconv.Atoi(f[3])
	return procStat{state: f[0][0], ppid: ppid, pgrp: pgrp, sid: sid}, true
}

// children lists pid's direct children (all threads), using /proc/PID/task/TID/children.
func children(pid int) []int {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// descendants returns root and all its descendants (bounded, breadth first).
func descendants(root int) []int {
	out := []int{root}
	for i := 0; i < len(out) && len(out) < 4096; i++ {
		out = append(out, children(out[i])...)
	}
	return out
}

// fgWaitingForInput reports whether a task of a process in foreground group pgid (among
// root's descendants) is blocked reading the terminal tty: in read(2) on it, or in
// select/poll/epoll with it in the read set.
// The reader is reported too: root itself (the shell) or another process.
func fgWaitingForInput(root, pgid int, tty string) (waiting, byRoot bool) {
	for _, pid := range descendants(root) {
		st, ok := readStat(pid)
		if !ok || st.pgrp != pgid {
			continue
		}
		if procWaitingForInput(pid, tty) {
			return true, pid == root
		}
	}
	return false, false
}

func procWaitingForInput(pid int, tty string) bool {
	base := "/proc/" + strconv.Itoa(pid)
	tasks, err := os.ReadDir(base + "/task")
	if err != nil {
		return false
	}
	// The process's terminal descriptors, read only for a task asleep in a
	// select, poll or epoll (a read names its one descriptor): a sample finds
	// most processes running or in another call (a shell in wait4), and listing
	// every descriptor is most of a sample's cost.
	var ttyFDs map[int]bool
	listed := false
	fds := func() map[int]bool {
		if !listed {
			ttyFDs, listed = terminalFDs(base, tty), true
		}
		return ttyFDs
	}
	for _, t := range tasks {
		b, err := os.ReadFile(base + "/task/" + t.Name() + "/syscall")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 3 {
			continue // the kernel says running, or the task is not in a syscall
		}
		nr, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		arg := func(i int) uint64 {
			if i+1 >= len(f) {
				return 0
			}
			v, _ := strconv.ParseUint(strings.TrimPrefix(f[i+1], "0x"), 16, 64)
			return v
		}
		on := false
		switch syscallClass(nr) {
		case sysRead:
			on = isTerminalFD(base, int(arg(0)), tty)
		case sysSelect:
			on = len(fds()) > 0 && selectWaitsOn(base, int(arg(0)), arg(1), fds())
		case sysPoll:
			on = len(fds()) > 0 && pollWaitsOn(base, arg(0), int(arg(1)), fds())
		case sysEpoll:
			on = len(fds()) > 0 && epollWaitsOn(base, int(arg(0)), fds())
		}
		// Still asleep in it, read after the syscall: a task that input woke shows
		// the same syscall until it runs again, which a loaded machine can delay.
		if on && taskSleeping(base+"/task/"+t.Name()) {
			return true
		}
	}
	return false
}

// taskSleeping reports whether the task at /proc/PID/task/TID is in interruptible
// sleep (state S), as a task blocked reading a terminal is.
func taskSleeping(dir string) bool {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'S'
}

// terminalFDs lists the fds of a process that refer to the terminal.
// isTerminalFD reports whether the process's descriptor fd is the terminal tty.
func isTerminalFD(base string, fd int, tty string) bool {
	if fd < 0 {
		return false
	}
	link, err := os.Readlink(base + "/fd/" + strconv.Itoa(fd))
	return err == nil && (link == tty || link == "/dev/tty")
}

func terminalFDs(base, tty string) map[int]bool {
	ents, err := os.ReadDir(base + "/fd")
	if err != nil {
		return nil
	}
	var m map[int]bool
	for _, e := range ents {
		link, err := os.Readlink(base + "/fd/" + e.Name())
		if err != nil || (link != tty && link != "/dev/tty") {
			continue
		}
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if m == nil {
			m = make(map[int]bool)
		}
		m[fd] = true
	}
	return m
}

// readMem reads n bytes of a process's memory at addr.
func readMem(base string, addr uint64, n int) ([]byte, bool) {
	if addr == 0 || n <= 0 {
		return nil, false
	}
	f, err := os.Open(base + "/mem")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		return nil, false
	}
	return b, true
}

// selectWaitsOn checks an fd_set of readfds. When the memory is unreadable (another
// user's setuid program), it assumes the terminal is watched.
func selectWaitsOn(base string, nfds int, readfds uint64, tty map[int]bool) bool {
	if readfds == 0 || nfds <= 0 {
		return false
	}
	nfds = min(nfds, 1024)
	set, ok := readMem(base, readfds, (nfds+63)/64*8)
	if !ok {
		return true
	}
	for fd := range tty {
		if fd < nfds && set[fd/8]&(1<<(fd%8)) != 0 {
			return true
		}
	}
	return false
}

// pollWaitsOn checks a struct pollfd array for a terminal fd polled for input.
func pollWaitsOn(base string, fds uint64, nfds int, tty map[int]bool) bool {
	if nfds <= 0 {
		return false
	}
	nfds = min(nfds, 256)
	b, ok := readMem(base, fds, nfds*8)
	if !ok {
		return true
	}
	for i := 0; i < nfds; i++ {
		fd := int(int32(binary.NativeEndian.Uint32(b[i*8:])))
		events := binary.NativeEndian.Uint16(b[i*8+4:])
		if tty[fd] && events&(unix.POLLIN|unix.POLLPRI) != 0 {
			return true
		}
	}
	return false
}

// epollWaitsOn checks the fds registered in an epoll instance (from fdinfo).
func epollWaitsOn(base string, epfd int, tty map[int]bool) bool {
	f, err := os.Open(base + "/fdinfo/" + strconv.Itoa(epfd))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// tfd:        0 events:       19 data: ...
		fl := strings.Fields(sc.Text())
		if len(fl) < 4 || fl[0] != "tfd:" || fl[2] != "events:" {
			continue
		}
		fd, err1 := strconv.Atoi(fl[1])
		ev, err2 := strconv.ParseUint(fl[3], 16, 32)
		if err1 == nil && err2 == nil && tty[fd] && ev&unix.EPOLLIN != 0 {
			return true
		}
	}
	return false
}

// killSession signals every process in the session led by sid: the shell and all its
// jobs, including background process groups.
func killSession(sid int, sig syscall.Signal) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	groups := map[int]bool{sid: true}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && st.sid == sid {
			groups[st.pgrp] = true
		}
	}
	for pg := range groups {
		_ = syscall.Kill(-pg, sig)
	}
	_ = syscall.Kill(sid, sig)
}

// procImage identifies the program image a process runs: an exec (`exec bash` in the
// session's shell) changes it while the pid stays. The addresses of the argument and
// environment strings move with every exec (address space randomisation); the command
// line tells images apart where randomisation is off.
type procImage struct {
	addrs   string
	cmdline string
}

// readImage returns pid's image, ok false when /proc does not say, or says it only
// in part (see parseImage).
func readImage(pid int) (procImage, bool) {
	base := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(base + "/stat")
	if err != nil {
		return procImage{}, false
	}
	cl, err := os.ReadFile(base + "/cmdline")
	if err != nil {
		return procImage{}, false
	}
	return parseImage(stat, cl)
}

// parseImage is the image that a process's stat and cmdline files describe, ok
// false unless they describe it whole. exec.Cmd.Start returns once the child's
// close-on-exec descriptors are closed, which the kernel does in the middle of the
// exec, before it sets the new image's argument and environment addresses: read
// then, they are in part 0 and the command line is empty, and the image a moment
// later (the shell's own) would look like another program's.
func parseImage(stat, cmdline []byte) (procImage, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return procImage{}, false
	}
	f := strings.Fields(string(stat[i+2:]))
	if len(f) < 49 { // arg_start .. env_end are fields 48..51 (f[45..48])
		return procImage{}, false
	}
	addrs := f[45:49]
	if slices.Contains(addrs, "0") || len(cmdline) == 0 {
		return procImage{}, false
	}
	return procImage{addrs: strings.Join(addrs, " "), cmdline: string(cmdline)}, true
}
