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

	"github.com/fleetmux/fleetmux/internal/ptyio"
	"github.com/fleetmux/fleetmux/internal/ring"
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

// held is one session of the holder. An idle session parks one goroutine, its
// read loop (on the runtime's poller, holding no buffer); the holder's reaper
// learns its exit, and a sender runs only while its stream has something to send.
type held struct {
	id     string
	pid    int
	nonce  string
	master *os.File // non-blocking; read only by readLoop
	kept   *os.File // the agent's end of the guard channel, or nil

	fdMu   sync.RWMutex // held (read) while master or kept is passed; forget closes them under it
	fdGone bool         // master and kept are closed; guarded by fdMu

	mu       sync.Mutex // guards everything below
	meta     json.RawMessage
	ring     *ring.Ring
	changed  chan struct{} // made by a waiter (changedLocked), closed on output, reap, exit and forget
	reaped   bool          // the child exited; its zombie is kept (Exited) until released
	status   int           // with reaped: its exit code (-1: unknown)
	released bool          // the zombie was reaped: its pid may be reused, never signal it
	drain    *time.Timer   // from the reap until exited: the bound on the wait for the last output
	exited   bool          // reaped and drained: the exit may be sent
	code     *int
	readDone bool
	roomWait bool           // the read loop waits for the agent's stream (waitRoom)
	gone     bool           // forgotten: streams end
	out      *outStream     // the attached agent's stream, if any (one at a time, by epoch: see attach)
	epoch    uint64         // how many attaches the session had: the newest stream's epoch
	wg       sync.WaitGroup // readLoop and the stream's sender
}

// spawn starts sp's program on a new PTY. files are the child's (sp.ChildFDs) and,
// with sp.Keep, one more to keep; spawn closes those it does not keep.
// The reaper r learns its exit.
func spawn(sp *Spawn, files []*os.File, r *reaper) (*held, error) {
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
	} else if uid, gid := os.Geteuid(), os.Getegid(); sp.UserNS && uid != 0 {
		a := cmd.SysProcAttr // as sandbox.Unprivileged does (a holder links no sandbox)
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		a.GidMappingsEnableSetgroups = false
		a.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
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
	// The reaper waits for the child (wait4 on its pid): the Process and its pidfd
	// are not needed, and the command (its environment and arguments) is not kept.
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	h := &held{
		id: sp.ID, pid: pid, nonce: sp.Nonce, meta: sp.Meta,
		master: master, kept: kept, ring: ring.New(size),
	}
	h.wg.Add(1)
	go h.readLoop()
	r.add(h)
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

// waitRoom blocks the read loop while an attached agent's stream has not been sent
// what the next read could overwrite in the ring: with an agent attached, the ring
// never drops output the agent has not had (the program waits, as it would for a
// slow terminal; the agent reads at memory speed, and a replay of the whole ring
// after an attach is quick). With no agent attached, the oldest output goes. An
// agent that went away without closing its stream frees it at the next send
// (EPIPE), the next attach or forget, which all wake this.
func (h *held) waitRoom() {
	for {
		h.mu.Lock()
		o := h.out
		if o == nil || h.gone || o.off >= h.ring.End()-int64(max(h.ring.Size()-chunk, 0)) {
			h.roomWait = false
			h.mu.Unlock()
			return
		}
		h.roomWait = true // the exit's drain waits on while this does (drained)
		ch := h.changedLocked()
		h.mu.Unlock()
		<-ch
	}
}

// changedLocked is a channel closed at the session's next change (output, reap,
// exit, forget). h.mu held.
func (h *held) changedLocked() <-chan struct{} {
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.changed
}

// broadcastLocked wakes the waiters of changedLocked. h.mu held.
func (h *held) broadcastLocked() {
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// readLoop is the only reader of the master: it appends to the ring until EOF,
// and starts the stream's sender when it is not running.
func (h *held) readLoop() {
	defer h.wg.Done()
	pr, err := ptyio.NewReader(h.master)
	for err == nil {
		h.waitRoom()
		var bp *[]byte
		var n int
		bp, n, err = pr.Read() // a pooled buffer, taken only when there is output
		if n > 0 {
			h.mu.Lock()
			h.ring.Write((*bp)[:n])
			h.kickLocked()
			h.broadcastLocked()
			h.mu.Unlock()
		}
		ptyio.Release(bp)
	}
	h.mu.Lock()
	h.readDone = true
	if h.reaped && !h.exited {
		h.exitLocked()
	}
	h.broadcastLocked()
	h.mu.Unlock()
}

// reap reaps the child when it exited (never blocks) and reports whether it is
// reaped. The exit is recorded once the read loop drained the master, or after
// drainAfterExit (a background job may keep the terminal open forever). Called by
// the reaper only.
func (h *held) reap() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reaped {
		return true
	}
	code, exited := ptyio.Exited(h.pid) // the zombie stays: the pid is ours to signal until release
	if !exited {
		return false // still running
	}
	h.status = code
	h.reaped = true
	if h.gone {
		h.releaseLocked() // forgotten before it exited: nobody signals it any more
	}
	h.broadcastLocked()
	if h.readDone {
		h.exitLocked()
	} else {
		h.drain = time.AfterFunc(drainAfterExit, h.drained)
	}
	return true
}

// drained records the exit when the read loop did not reach EOF in time.
func (h *held) drained() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.exited {
		return
	}
	if h.roomWait {
		// The read loop is not reading because the agent has not taken what it
		// read yet (waitRoom), not because a background job keeps the terminal
		// open: what is left in the terminal is the program's last output. Wait on.
		h.drain = time.AfterFunc(drainAfterExit, h.drained)
		return
	}
	h.exitLocked()
}

// exitLocked records the exit (the child is reaped) and lets the stream send it.
// h.mu held.
func (h *held) exitLocked() {
	h.exited = true
	if h.status >= 0 {
		code := h.status
		h.code = &code
	}
	if h.drain != nil {
		h.drain.Stop()
		h.drain = nil
	}
	h.kickLocked()
	h.broadcastLocked()
}

func (h *held) info() Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.infoLocked()
}

func (h *held) infoLocked() Info {
	i := Info{ID: h.id, PID: h.pid, Meta: h.meta, Start: h.ring.Start(), End: h.ring.End(), Exited: h.exited, Code: h.code, Epoch: h.epoch}
	if h.out != nil {
		i.StreamPID = h.out.pid
	}
	return i
}

// signal signals every process in the session: the shell and all its jobs,
// including background process groups. Until the session releases its zombie the
// shell's pid (the session id, its process group id) cannot be given to another
// process, so the numbers are the session's: after the release nothing is
// signalled (h.mu held across the kill and the release).
func (h *held) signal(sig syscall.Signal) {
	h.mu.Lock()
	exited := h.exited
	h.mu.Unlock()
	if exited && sig != syscall.SIGKILL {
		return
	}
	groups := map[int]bool{}
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
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return // the pid, and the ids it led, may be another's now
	}
	groups[h.pid] = true
	for pg := range groups {
		_ = syscall.Kill(-pg, sig)
	}
	_ = syscall.Kill(h.pid, sig)
}

// releaseLocked reaps the child's zombie once its session is done with its pid
// (close has sent its last signal, or the session was forgotten). h.mu held.
func (h *held) releaseLocked() {
	if h.reaped && !h.released {
		ptyio.Reap(h.pid)
		h.released = true
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

// close ends the session: SIGHUP to all its processes, repeated every hupEvery
// (a shell can take one just before it blocks and miss it), SIGKILL after grace;
// then forget. It blocks up to about twice grace (the reap after the SIGKILL).
func (h *held) close(grace time.Duration) {
	deadline := time.Now().Add(grace)
	for {
		h.mu.Lock()
		exited, ch := h.exited, h.changedLocked()
		h.mu.Unlock()
		if exited {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
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
	// Wait for the reap, so the exit is known when close returns.
	t := time.NewTimer(grace)
	defer t.Stop()
	for {
		h.mu.Lock()
		reaped, ch := h.reaped, h.changedLocked()
		h.mu.Unlock()
		if reaped {
			break
		}
		select {
		case <-ch:
			continue
		case <-t.C:
		}
		break
	}
	h.mu.Lock()
	h.releaseLocked() // not yet exited: the reaper releases it once it has (h.gone)
	h.mu.Unlock()
	h.forget()
}

// forget releases the session's fds and ends its stream; the read loop ends. It
// blocks until the read loop and the sender did. The child, when not reaped yet,
// stays the reaper's.
func (h *held) forget() {
	h.mu.Lock()
	h.gone = true
	if h.out != nil {
		h.out.c.close()
		h.out = nil
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
