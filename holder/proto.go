package holder

// The wire protocol between the holder and its agent.
//
// Transport: a Unix SOCK_SEQPACKET socket (holder.sock in the holder's directory,
// 0600, in a 0700 directory). Each message is one packet, so a message never splits
// and the file descriptors passed with it (SCM_RIGHTS) arrive with it. Both sides
// check the peer's uid (SO_PEERCRED): only the holder's own user gets in. The
// agent's hello also carries the holder's key (KeyName in the holder's
// directory, 0600, new at each holder start): a process of the same user that
// cannot read the holder's directory (a session, kept out of the node's data
// dir) is refused even when it can reach the socket.
//
// A message is one kind byte and a body:
//
//	'H' hello    JSON hello, first message both ways on every connection
//	'Q' request  JSON request (agent to holder)
//	'R' reply    JSON reply (holder to agent), with fds when reply.FDs > 0
//	'O' output   8-byte big-endian offset, then raw output bytes (attach streams)
//	'X' exit     JSON exitInfo: the session's program ended and all its output was sent
//
// An attach turns its connection into the session's stream. One stream per session
// at a time, by epoch (the count of its attaches): an attach names the epoch of the
// stream it ends (0: none live), and one that names another is refused (reply.Stale).
//
// The agent speaks first: hello{Proto}. The holder answers hello{Proto, Version, PID}
// when it speaks that protocol, or a reply with an error naming both numbers, and
// closes. Within one Proto number, messages only gain JSON fields (old readers
// ignore them), so an agent upgrade never needs a new holder; a new Proto number
// means the holder must be restarted, which ends its sessions (README: "what survives
// what").

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Proto is the protocol version this package speaks.
const Proto = 1

const (
	kindHello   = 'H'
	kindRequest = 'Q'
	kindReply   = 'R'
	kindOutput  = 'O'
	kindExit    = 'X'

	// chunk is the most output bytes one 'O' message carries.
	chunk = 32 << 10
	// maxMessage bounds every message read (a spawn request with its environment
	// is the largest).
	maxMessage = 256 << 10
	// maxFDs bounds the fds one message may carry.
	maxFDs = 6
)

// Errors callers match.
var (
	// ErrVersion: the holder and the agent speak different protocol versions.
	ErrVersion = errors.New("holder: protocol version mismatch")
	// ErrNoSession: the holder has no session of that id.
	ErrNoSession = errors.New("holder: no such session")
	// ErrPeer: the other end of the socket is another user.
	ErrPeer = errors.New("holder: peer is another user")
	// ErrDenied: the holder refused the agent's key (KeyName).
	ErrDenied = errors.New("holder: refused: wrong key")
	// ErrProtocol: a malformed or unexpected message.
	ErrProtocol = errors.New("holder: protocol error")
	// ErrClosed: the holder or the connection is closed.
	ErrClosed = errors.New("holder: closed")
	// ErrStale: an attach was refused because the session's epoch is not the one
	// the attacher gave: another process is attached to it (an attach with epoch
	// 0), or attached after the epoch given. List tells who and at which epoch.
	ErrStale = errors.New("holder: attach refused: the session is attached elsewhere")
)

type hello struct {
	Proto   int    `json:"proto"`
	Key     string `json:"key,omitempty"`     // the agent's: the holder's key file
	Version string `json:"version,omitempty"` // the binary's version, for logs
	PID     int    `json:"pid,omitempty"`
}

// request is every request; Op says which fields count.
type request struct {
	Op     string          `json:"op"` // spawn, list, attach, signal, meta, close
	ID     string          `json:"id,omitempty"`
	From   int64           `json:"from,omitempty"`   // attach
	Signal int             `json:"signal,omitempty"` // signal
	Spawn  *Spawn          `json:"spawn,omitempty"`  // spawn
	Meta   json.RawMessage `json:"meta,omitempty"`   // meta
	// Epoch (attach) is the session's epoch as the attacher knows it: the epoch
	// of its own last attach, or one a list showed. 0 asks for a session nobody
	// is attached to.
	Epoch uint64 `json:"epoch,omitempty"`
}

type reply struct {
	Error    string `json:"error,omitempty"`
	NotFound bool   `json:"not_found,omitempty"`
	FDs      int    `json:"fds,omitempty"` // how many fds came with the reply
	Info     *Info  `json:"info,omitempty"`
	List     []Info `json:"list,omitempty"`
	Nonce    string `json:"nonce,omitempty"`  // attach
	From     int64  `json:"from,omitempty"`   // attach: where the stream starts
	Epoch    uint64 `json:"epoch,omitempty"`  // attach: the stream's epoch
	Stale    bool   `json:"stale,omitempty"`  // attach: refused, see ErrStale
	Denied   bool   `json:"denied,omitempty"` // hello: refused, see ErrDenied
}

type exitInfo struct {
	Code *int  `json:"code,omitempty"` // nil: unknown
	End  int64 `json:"end"`            // the end of the output
}

// Spawn is what the holder needs to start a session's program. The agent prepares
// everything (argv, environment, integration files, the fds the child inherits);
// the holder only opens the PTY, starts the child on it and keeps it.
type Spawn struct {
	ID   string   `json:"id"`
	Argv []string `json:"argv"` // argv[0] is a path
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
	Cols int      `json:"cols"`
	Rows int      `json:"rows"`
	// UID, GID and Groups, when Cred is set, are the child's credentials.
	Cred   bool     `json:"cred,omitempty"`
	UID    uint32   `json:"uid,omitempty"`
	GID    uint32   `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"`
	// UserNS starts the child (the sandbox wrapper of an agent without root) in
	// a user namespace of its own that maps only the holder's uid and gid, with
	// CAP_SYS_ADMIN there (ambient) for the mounts that hide the agent's data
	// dir; the wrapper drops it before the program runs (sandbox.Unprivileged).
	// Ignored with Cred or as root.
	UserNS bool `json:"userns,omitempty"`
	// ChildFDs are the child's fd numbers (3 and up) of the files passed with the
	// request, in order; the holder closes its copies once the child started.
	ChildFDs []int `json:"child_fds,omitempty"`
	// Keep: one more file is passed after those, which the holder keeps open and
	// hands back with every attach (the agent's end of the shell's guard channel,
	// so a question the shell asks while no agent runs waits for the next one).
	Keep bool `json:"keep,omitempty"`
	// Nonce is the shell integration's secret; kept in memory only, handed back on
	// attach.
	Nonce string `json:"nonce,omitempty"`
	// Ring is the size of the output ring (default DefaultRing).
	Ring int `json:"ring,omitempty"`
	// Meta is the agent's own description of the session (title, labels, shell,
	// ...), opaque to the holder, kept in memory and handed back by list and attach.
	Meta json.RawMessage `json:"meta,omitempty"`
}

// Info is what the holder knows about one of its sessions.
type Info struct {
	ID     string          `json:"id"`
	PID    int             `json:"pid"`
	Meta   json.RawMessage `json:"meta,omitempty"`
	Start  int64           `json:"start"` // oldest output offset in the ring
	End    int64           `json:"end"`   // end of the output
	Exited bool            `json:"exited,omitempty"`
	Code   *int            `json:"code,omitempty"` // exit code once exited (nil: unknown)
	// Epoch counts the session's attaches: the newest stream's epoch (0: never
	// attached).
	Epoch uint64 `json:"epoch,omitempty"`
	// StreamPID is the process holding the session's stream (0: none).
	StreamPID int `json:"stream_pid,omitempty"`
}

// conn is one end of a holder connection. Reads and writes are each used by one
// goroutine at a time (the owner serializes).
type conn struct {
	c   *net.UnixConn
	buf *[]byte // the last message read (its body is valid until the next recv), from msgBufs
	oob []byte
}

// msgBufs are the buffers messages are read into, shared by every connection: a
// connection holds one from a read until its next read begins, never while it
// waits, and an attach stream (which only sends) none at all.
var msgBufs = sync.Pool{New: func() any { b := make([]byte, maxMessage); return &b }}

func newConn(c *net.UnixConn) *conn {
	return &conn{c: c, oob: make([]byte, unix.CmsgSpace(maxFDs*4))}
}

// peerUID is the uid of the process at the other end (SO_PEERCRED).
func peerUID(c *net.UnixConn) (uint32, error) {
	cred, err := peerCred(c)
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}

// peerCred is the credentials of the process at the other end as it connected
// (SO_PEERCRED).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, serr
	}
	return cred, nil
}

// peerGone reports whether the other end closed the connection (or it failed);
// it never blocks. A stream's agent never writes to it, so this is how the holder
// tells a live stream from one whose agent went away without a send failing yet.
func (c *conn) peerGone() bool {
	rc, err := c.c.SyscallConn()
	if err != nil {
		return true
	}
	var revents int16
	var perr error
	if err := rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
		_, perr = unix.Poll(fds, 0)
		revents = fds[0].Revents
	}); err != nil || perr != nil {
		return err != nil
	}
	return revents&(unix.POLLHUP|unix.POLLRDHUP|unix.POLLERR|unix.POLLNVAL) != 0
}

// checkPeer refuses a peer of another uid than ours.
func checkPeer(c *net.UnixConn) error {
	uid, err := peerUID(c)
	if err != nil {
		return fmt.Errorf("holder: peer credentials: %w", err)
	}
	if int(uid) != os.Geteuid() {
		return fmt.Errorf("%w: uid %d (want %d)", ErrPeer, uid, os.Geteuid())
	}
	return nil
}

// send writes one message with the given files.
func (c *conn) send(kind byte, body []byte, files ...*os.File) error {
	msg := make([]byte, 1+len(body))
	msg[0] = kind
	copy(msg[1:], body)
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			// Not f.Fd(): it puts the open file description, which the
			// duplicates we pass share, in blocking mode, and a goroutine of
			// ours or of the peer reading it then blocks in the kernel for good.
			fd, err := rawFD(f)
			if err != nil {
				return err
			}
			fds[i] = fd
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.c.WriteMsgUnix(msg, oob, nil)
	return err
}

func (c *conn) sendJSON(kind byte, v any, files ...*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.send(kind, b, files...)
}

// sendOutput sends one output message: msg is the whole message, whose first 9
// bytes it fills (the kind and off) and whose rest is the output.
func (c *conn) sendOutput(off int64, msg []byte) error {
	msg[0] = kindOutput
	binary.BigEndian.PutUint64(msg[1:9], uint64(off))
	_, _, err := c.c.WriteMsgUnix(msg, nil, nil)
	return err
}

// release gives the buffer of the last message read back to the pool: the caller
// reads c no more (an attach stream, which only sends), or not for a while.
func (c *conn) release() {
	if c.buf != nil {
		msgBufs.Put(c.buf)
		c.buf = nil
	}
}

// recv reads one message: its kind, its body (valid until the next recv) and the
// files that came with it (the caller owns them).
func (c *conn) recv() (kind byte, body []byte, files []*os.File, err error) {
	c.release() // the previous message's body is no longer valid
	rc, err := c.c.SyscallConn()
	if err != nil {
		return 0, nil, nil, err
	}
	var n, oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		b := msgBufs.Get().(*[]byte)
		for {
			n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), *b, c.oob, unix.MSG_CMSG_CLOEXEC)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			msgBufs.Put(b)
			return false // wait for the poller, holding no buffer
		}
		c.buf = b
		return true
	})
	if err == nil {
		err = rerr
	}
	if err == nil && oobn > 0 {
		files = parseRights(c.oob[:oobn])
	}
	if err != nil {
		closeAll(files)
		return 0, nil, nil, err
	}
	if n == 0 {
		closeAll(files)
		return 0, nil, nil, ErrClosed // an empty packet: the peer shut down
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(files)
		return 0, nil, nil, fmt.Errorf("%w: message truncated", ErrProtocol)
	}
	buf := *c.buf
	return buf[0], buf[1:n], files, nil
}

// recvJSON reads one message of the given kind into v.
func (c *conn) recvJSON(want byte, v any) ([]*os.File, error) {
	kind, body, files, err := c.recv()
	if err != nil {
		return nil, err
	}
	if kind != want {
		closeAll(files)
		return nil, fmt.Errorf("%w: got message %q, want %q", ErrProtocol, kind, want)
	}
	if err := json.Unmarshal(body, v); err != nil {
		closeAll(files)
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return files, nil
}

func parseRights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "holder-fd"))
		}
	}
	return files
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

func (c *conn) close() error { return c.c.Close() }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// rawFD is f's descriptor, left as it is (f stays open while the caller uses it).
func rawFD(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(v uintptr) { fd = int(v) }); err != nil {
		return -1, err
	}
	return fd, nil
}
