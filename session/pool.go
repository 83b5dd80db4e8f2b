package session

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The read loop's buffer comes from a pool shared by every session and is taken
// only while there is something to read: an idle session waits on the runtime's
// poller holding no buffer (a 32 KiB buffer per session was most of what an idle
// session cost after its ring and screen).

var readBufs = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// ptyReader reads a non-blocking PTY master through the runtime's poller, with a
// pooled buffer.
type ptyReader struct {
	rc syscall.RawConn
}

func newPTYReader(f *os.File) (*ptyReader, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &ptyReader{rc: rc}, nil
}

// read waits until the master has output, then reads it into a buffer of the pool
// (the caller gives it back with release). It returns io.EOF at the end, and the
// master's error (EIO once the terminal's last holder closed it, os.ErrClosed
// after Close).
func (r *ptyReader) read() (buf *[]byte, n int, err error) {
	var rerr error
	err = r.rc.Read(func(fd uintptr) bool {
		b := readBufs.Get().(*[]byte)
		for {
			n, rerr = unix.Read(int(fd), *b)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			readBufs.Put(b)
			return false // wait for the poller, holding no buffer
		}
		buf = b
		return true
	})
	if err == nil {
		err = rerr
	}
	if n < 0 {
		n = 0
	}
	if err == nil && n == 0 {
		err = io.EOF
	}
	if errors.Is(err, unix.EIO) {
		err = syscall.EIO
	}
	return buf, n, err
}

func release(buf *[]byte) {
	if buf != nil {
		readBufs.Put(buf)
	}
}
