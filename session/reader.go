package session

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
