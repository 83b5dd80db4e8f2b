package session

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Full-screen programs: a program on the alternate screen (vim, top, less, htop)
// reads keys, not command lines. Run refuses to type a command into one (it
// would be keystrokes: `e` switches top's units, `:` starts a vim command)
// unless asked to type anyway (RunOptions.TypeAnyway), and names the program so
// that the caller can drive it with keys and read its screen instead.

// FullScreenError is Run's refusal while a full-screen program is in front. It
// is an ErrBusy.
type FullScreenError struct {
	// Program is the foreground program's name (its comm), or "" when /proc did
	// not say.
	Program string
}

func (e *FullScreenError) Error() string {
	return fmt.Sprintf("%v: %s is running full-screen and would take the command as keystrokes: "+
		"drive it with keys (send_keys; fleetmux keys) and read its screen (read_screen; fleetmux screen), or type the command anyway (type_anyway)",
		ErrBusy, programName(e.Program))
}

// Is makes a FullScreenError an ErrBusy.
func (e *FullScreenError) Is(target error) bool { return target == ErrBusy }

// programName is a program's name for a message: "a full-screen program" when
// unknown.
func programName(p string) string {
	if p == "" {
		return "a full-screen program"
	}
	return p
}

// mainScreenPrograms are full-screen programs that draw on the main screen (no
// alternate screen), by their comm.
var mainScreenPrograms = map[string]bool{"top": true}

// checkFullScreen returns a *FullScreenError when a full-screen program is in
// front (inFront).
func (s *Session) checkFullScreen() error {
	if prog, full := s.inFront(); full {
		return &FullScreenError{Program: prog}
	}
	return nil
}

// inFront names the program in front while the shell is not at its prompt
// (running a command, or a session of a program without a shell), and says
// whether it is a full-screen program: the alternate screen is on, or it is one
// of mainScreenPrograms. At the shell's prompt it reads nothing from /proc.
func (s *Session) inFront() (prog string, full bool) {
	s.mu.Lock()
	busy := s.state != StateIdle && s.state != StateStarting && !s.exited && !s.closed
	alt := s.altOnLocked()
	s.mu.Unlock()
	if !busy {
		return "", false
	}
	prog = s.foregroundProgram()
	return prog, alt || mainScreenPrograms[prog]
}

// foregroundProgram names the program in the foreground of the session's
// terminal: of the foreground process group's processes (among the session's),
// the one blocked reading the terminal, else the group's leader, else any. ""
// when the kernel does not say. It reads /proc: call it without s.mu.
func (s *Session) foregroundProgram() string {
	pg, err := foregroundPgrp(s.master)
	if err != nil || pg <= 0 {
		return ""
	}
	var leader, first int
	for _, pid := range descendants(s.pid) {
		st, ok := readStat(pid)
		if !ok || st.pgrp != pg {
			continue
		}
		if procWaitingForInput(pid, s.tty) {
			return procComm(pid)
		}
		if pid == pg {
			leader = pid
		}
		if first == 0 {
			first = pid
		}
	}
	switch {
	case leader != 0:
		return procComm(leader)
	case first != 0:
		return procComm(first)
	}
	return ""
}

// procComm is pid's command name (/proc/PID/comm, at most 15 bytes), with
// anything but printable ASCII replaced: it goes into messages.
func procComm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r >= 0x7f {
			return '?'
		}
		return r
	}, strings.TrimRight(string(b), "\n"))
}
