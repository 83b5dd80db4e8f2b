package holder

// One session the holder keeps: the PTY master (the holder is the only reader of
// it), the child (the holder is its parent and reaps it) and the ring of raw output.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Ring sizes.
const (
	DefaultRing = 1 << 20
	minRing     = 4 << 10
	maxRing     = 64 << 20
	// drainAfterExit bounds how long the exit waits for the last output once the
	// child is reaped (a background job may keep the terminal open forever).
	drainAfterExit = 200 * time.Millisecond
	// hupEvery is how often close repeats its SIGHUP.
	hupEvery = 100 * time.Millisecond
)

// held is one session of the holder. Its read loop and waiter run until the
// program ended and the master reached EOF; forget closes the master.
type held struct {
	id     string
	pid    int
	nonce  string
	master *os.File // non-blocking; read only by readLoop
	kept   *os.File // the agent's end of the guard channel, or nil
	cmd    *exec.Cmd

	fdMu   sync.RWMutex // held (read) while master or kept is passed; forget closes them under it
	fdGone bool         // master and kept are closed; guarded by fdMu

	mu       sync.Mutex // guards everything below
	meta     json.RawMessage
	ring     *ring
	changed  chan struct{} // closed and replaced on output, exit and forget
	exited   bool          // reaped and drained: the exit may be sent
	code     *int
	readDone bool
	gone     bool  // forgotten: streams end
	stream   *conn // the attached agent's stream, if any (newest attach wins)
	wg       sync.WaitGroup
}

// spawn starts sp's program on a new PTY. files are the child's (sp.ChildFDs) and,
// with sp.Keep, one more to keep; spawn closes those it does not keep.
func spawn(sp *Spawn, files []*os.File) (*held, error) {
	want := len(sp.ChildFDs)
	if sp.Keep {
		want++
	}
	if len(files) != want {
		closeAll(files)
		return nil, fmt.Errorf("%w: spawn with %d files, want %d", ErrProtocol, len(files), want)
	}
	var kept *os.File
	if sp.Keep {
		kept = files[len(files)-1]
		files = files[:len(files)-1]
	}
	defer closeAll(files)
	fail := func(err error) (*held, error) {
		if kept != nil {
			kept.Close()
		}
		return nil, err
	}
	if len(sp.Meta) > maxMeta {
		return fail(fmt.Errorf("%w: meta of %d bytes (limit %d)", ErrProtocol, len(sp.Meta), maxMeta))
	}
	if len(sp.Argv) == 0 || sp.Argv[0] == "" {
		return fail(fmt.Errorf("%w: spawn without a program", ErrProtocol))
	}
	if sp.Cols < 1 || sp.Rows < 1 || sp.Cols > 1000 || sp.Rows > 1000 {
		return fail(fmt.Errorf("%w: size %dx%d", ErrProtocol, sp.Cols, sp.Rows))
	}
	size := sp.Ring
	if size == 0 {
		size = DefaultRing
	}
	if size < minRing || size > maxRing {
		return fail(fmt.Errorf("%w: ring of %d bytes (want %d..%d)", ErrProtocol, size, minRing, maxRing))
	}
	extra := []*os.File{}
	for i, fd := range sp.ChildFDs {
		if fd < 3 || fd > 3+maxFDs {
			return fail(fmt.Errorf("%w: child fd %d", ErrProtocol, fd))
		}
		for len(extra) < fd-2 {
			extra = append(extra, nil)
		}
		extra[fd-3] = files[i]
	}

	ptmx, tty, err := pty.Open()
	if err != nil {
		return fail(fmt.Errorf("holder: open pty: %w", err))
	}
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(sp.Cols), Rows: uint16(sp.Rows)}); err != nil {
		ptmx.Close()
		return fail(fmt.Errorf("holder: set size: %w", err))
	}
	if sp.Cred {
		if err := os.Chown(tty.Name(), int(sp.UID), -1); err != nil {
			ptmx.Close()
			return fail(fmt.Errorf("holder: give the tty: %w", err))
		}
	}
	cmd := exec.Command(sp.Argv[0], sp.Argv[1:]...)
	cmd.Dir, cmd.Env = sp.Dir, sp.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if sp.Cred {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: sp.UID, Gid: sp.GID, Groups: sp.Groups}
	}
	if err := cmd.Start(); err != nil {
		ptmx.Close()
		return fail(fmt.Errorf("holder: start %s: %w", sp.Argv[0], err))
	}
	master, err := nonblocking(ptmx)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fail(err)
	}
	h := &held{
		id: sp.ID, pid: cmd.Process.Pid, nonce: sp.Nonce, meta: sp.Meta,
		master: master, kept: kept, cmd: cmd,
		ring: newRing(size), changed: make(chan struct{}),
	}
	h.wg.Add(2)
	go h.readLoop()
	go h.waitLoop()
	return h, nil
}

func nonblocking(f *os.File) (*os.File, error) {
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("holder: dup pty: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("holder: nonblock pty: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), nil
}

// broadcastLocked wakes every stream.
func (h *held) broadcastLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// readLoop is the only reader of the master: it appends to the ring until EOF.
func (h *held) readLoop() {
	defer h.wg.Done()
	pr, err := NewPTYReader(h.master)
	for err == nil {
		var bp *[]byte
		var n int
		bp, n, err = pr.Read() // a pooled buffer, taken only when there is output
		if n > 0 {
			h.mu.Lock()
			h.ring.write((*bp)[:n])
			h.broadcastLocked()
			h.mu.Unlock()
		}
		Release(bp)
	}
	h.mu.Lock()
	h.readDone = true
	h.broadcastLocked()
	h.mu.Unlock()
}

// waitLoop reaps the child, lets the read loop drain (bounded) and records the exit.
func (h *held) waitLoop() {
	defer h.wg.Done()
	AwaitExit(h.pid) // on the poller, not in wait4: no thread per session
	err := h.cmd.Wait()
	code := ExitCode(err)
	deadline := time.NewTimer(drainAfterExit)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		done, ch := h.readDone, h.changed
		h.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ch:
			continue
		case <-deadline.C:
		}
		break
	}
	h.mu.Lock()
	h.exited = true
	if code >= 0 {
		h.code = &code
	}
	h.broadcastLocked()
	h.mu.Unlock()
}

func (h *held) info() Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.infoLocked()
}

func (h *held) infoLocked() Info {
	return Info{ID: h.id, PID: h.pid, Meta: h.meta, Start: h.ring.start(), End: h.ring.end, Exited: h.exited, Code: h.code}
}

// signal signals every process in the session: the shell and all its jobs,
// including background process groups. The child is unreaped until it exited, so
// its pid (the session id) is not reused meanwhile.
func (h *held) signal(sig syscall.Signal) {
	h.mu.Lock()
	exited := h.exited
	h.mu.Unlock()
	if exited && sig != syscall.SIGKILL {
		return
	}
	groups := map[int]bool{h.pid: true}
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if pgrp, sid, ok := procIDs(pid); ok && sid == h.pid {
				groups[pgrp] = true
			}
		}
	}
	for pg := range groups {
		_ = syscall.Kill(-pg, sig)
	}
	if !exited {
		_ = syscall.Kill(h.pid, sig)
	}
}

// procIDs reads the process group and session of pid from /proc.
func procIDs(pid int) (pgrp, sid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := lastIndex(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	var state byte
	var ppid int
	if _, err := fmt.Sscanf(string(b[i+2:]), "%c %d %d %d", &state, &ppid, &pgrp, &sid); err != nil {
		return 0, 0, false
	}
	return pgrp, sid, true
}

func lastIndex(b []byte, c byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// attach makes c the session's stream, ending the previous one, and returns what
// the reply needs.
func (h *held) attach(c *conn, from int64) (Info, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stream != nil && h.stream != c {
		h.stream.close() // the older agent's stream ends: newest attach wins
	}
	h.stream = c
	h.broadcastLocked()
	return h.infoLocked(), clamp(from, h.ring.start(), h.ring.end)
}

// serve streams output from off to c until the exit is sent, c breaks, another
// attach replaces it or the session is forgotten. done is closed when the agent's
// side of c closes.
func (h *held) serve(c *conn, off int64, done <-chan struct{}) {
	for {
		h.mu.Lock()
		if h.stream != c || h.gone {
			h.mu.Unlock()
			return
		}
		start, p := h.ring.read(off, chunk)
		end, exited, code, ch := h.ring.end, h.exited, h.code, h.changed
		h.mu.Unlock()
		if len(p) > 0 {
			if err := c.sendOutput(start, p); err != nil {
				return
			}
			off = start + int64(len(p))
			continue
		}
		if exited && off >= end {
			_ = c.sendJSON(kindExit, exitInfo{Code: code, End: end})
			return
		}
		select {
		case <-ch:
		case <-done:
			return
		}
	}
}

// detach forgets c as the stream when it still is.
func (h *held) detach(c *conn) {
	h.mu.Lock()
	if h.stream == c {
		h.stream = nil
	}
	h.mu.Unlock()
}

// close ends the session: SIGHUP to all its processes, repeated every hupEvery
// (a shell can take one just before it blocks and miss it), SIGKILL after grace;
// then forget. It blocks up to about grace.
func (h *held) close(grace time.Duration) {
	deadline := time.Now().Add(grace)
	for {
		h.mu.Lock()
		exited, ch := h.exited, h.changed
		h.mu.Unlock()
		if exited {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			h.signal(syscall.SIGKILL)
			break
		}
		h.signal(syscall.SIGHUP)
		t := time.NewTimer(min(hupEvery, left))
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
	h.signal(syscall.SIGKILL) // background jobs may outlive the shell
	h.forget()
}

// forget releases the session's fds and ends its streams; the loops end (the
// waiter once the child is reaped). It blocks until they did.
func (h *held) forget() {
	h.mu.Lock()
	h.gone = true
	if h.stream != nil {
		h.stream.close()
		h.stream = nil
	}
	h.broadcastLocked()
	h.mu.Unlock()
	h.fdMu.Lock()
	h.fdGone = true
	h.master.Close()
	if h.kept != nil {
		h.kept.Close()
	}
	h.fdMu.Unlock()
	h.wg.Wait()
}

// withFiles calls f with the files to pass (the master, and the kept file when
// there is one) while they stay open.
func (h *held) withFiles(f func(files []*os.File) error) error {
	h.fdMu.RLock()
	defer h.fdMu.RUnlock()
	if h.fdGone {
		return fmt.Errorf("%w: %s closed", ErrNoSession, h.id)
	}
	files := []*os.File{h.master}
	if h.kept != nil {
		files = append(files, h.kept)
	}
	return f(files)
}
