package session

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/internal/ptyio"
)

// exits watches the programs of every local session (a PTY of this process) for
// their exit: their pidfds are in one epoll descriptor that the runtime's poller
// waits on, so the process has one goroutine for all of them while any runs (it
// ends when none is left) instead of a waiter per session. An exit starts that
// session's exit work (reap, let the read loop drain, record) on a goroutine of
// its own, counted in the session's wg from the watch on, so Close waits for it.
var exits exitWatch

type exitWatch struct {
	mu      sync.Mutex         // guards everything below
	ep      *os.File           // the epoll descriptor (non-blocking); nil while nothing is watched
	epfd    int                // ep's descriptor, for epoll_ctl
	watched map[int32]*Session // by pidfd
	running bool               // the watching goroutine runs (it owns ep while it does)
}

// watch watches s's program (s.pid) for its exit; s.wg must count the exit work
// (watch's caller adds it). An error (no pidfd, no epoll) leaves it unwatched:
// the caller then waits on its own.
func (w *exitWatch) watch(s *Session) error {
	fd, err := unix.PidfdOpen(s.pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ep == nil {
		efd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			unix.Close(fd)
			return err
		}
		if err := unix.SetNonblock(efd, true); err != nil {
			unix.Close(efd)
			unix.Close(fd)
			return err
		}
		w.ep, w.epfd = os.NewFile(uintptr(efd), "exits"), efd // non-blocking: the poller waits on it
		w.watched = map[int32]*Session{}
	}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
		unix.Close(fd)
		return err
	}
	w.watched[int32(fd)] = s
	if !w.running {
		w.running = true
		go w.loop(w.ep, w.epfd)
	}
	return nil
}

// loop waits for exits until nothing is watched (or the epoll descriptor fails:
// then each session left waits on its own).
func (w *exitWatch) loop(ep *os.File, epfd int) {
	rc, err := ep.SyscallConn()
	events := make([]unix.EpollEvent, 16)
	for {
		var ready []int32
		if err == nil {
			var werr error
			err = rc.Read(func(uintptr) bool {
				for {
					n, err := unix.EpollWait(epfd, events, 0)
					if err == unix.EINTR {
						continue
					}
					if err != nil {
						werr = err
						return true
					}
					for _, e := range events[:n] {
						ready = append(ready, e.Fd)
					}
					return n > 0 // none ready: wait on the poller
				}
			})
			if err == nil {
				err = werr
			}
		}
		w.mu.Lock()
		for _, fd := range ready {
			s, ok := w.watched[fd]
			if !ok {
				continue
			}
			delete(w.watched, fd)
			_ = unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
			unix.Close(int(fd))
			go s.exitWork(false)
		}
		if err != nil || len(w.watched) == 0 {
			for fd, s := range w.watched {
				unix.Close(int(fd))
				s.log.Warn("exit watch failed: the session waits for its exit on its own", "err", err)
				go s.exitWork(true)
			}
			w.watched, w.running, w.ep = nil, false, nil
			ep.Close()
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// exitWork records the program's exit once it exited (wait: first wait for that,
// on the poller). It leaves the program unreaped (Close reaps it, after its last
// signal: until then the zombie keeps the pid, which names the session's process
// group and session, from going to another process). It ends the count watch's
// caller added.
func (s *Session) exitWork(wait bool) {
	defer s.wg.Done()
	code := -1
	if wait {
		code = ptyio.AwaitExited(s.pid) // on the poller, not in wait4: no thread per session
	} else if c, ok := ptyio.Exited(s.pid); ok {
		code = c
	}
	// Let the read loop drain what the process wrote before it exited (bounded: a
	// background job may still hold the terminal open, so EOF may never come).
	deadline := time.NewTimer(200 * time.Millisecond)
	defer deadline.Stop()
drain:
	for {
		s.mu.Lock()
		done, ch := s.readDone, s.changedLocked()
		s.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ch:
		case <-deadline.C:
			break drain
		}
	}
	var c *int
	if code >= 0 {
		c = &code
	}
	s.recordExit(c)
}
