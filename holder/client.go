package holder

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/internal/datadir"
)

// Client is an agent's connection to its holder for requests (spawn, list, signal,
// close); each attach gets a connection of its own (Stream). Safe for concurrent
// use: requests are serialized.
type Client struct {
	path string
	peer hello // the holder's hello

	mu sync.Mutex // serializes requests on c
	c  *conn
}

// Dial connects to the holder listening in dir and checks that it is our user's and
// speaks our protocol (ErrVersion otherwise). It gives up when ctx ends.
func Dial(ctx context.Context, dir string) (*Client, error) {
	path := filepath.Join(dir, SocketName)
	c, peer, err := dial(ctx, path)
	if err != nil {
		return nil, err
	}
	return &Client{path: path, peer: peer, c: c}, nil
}

// dialTries bounds the hellos dial sends when the key file changes between
// reading it and being refused.
const dialTries = 3

// dial connects to the holder at path with the key in its directory. A holder
// that starts writes its key just before it listens, so an agent can read the
// file (or find none) just before a new holder writes it, and show the old key
// to the new holder: refused while the file now holds another key, dial reads
// it again and says hello again.
func dial(ctx context.Context, path string) (*conn, hello, error) {
	keyPath := filepath.Join(filepath.Dir(path), KeyName)
	for try := 1; ; try++ {
		c, peer, key, err := dialKey(ctx, path, keyPath)
		if !errors.Is(err, ErrDenied) || try == dialTries {
			return c, peer, err
		}
		if now, rerr := datadir.ReadFile(keyPath); rerr != nil || string(now) == string(key) {
			return c, peer, err // the key shown is the file's: wrong for this holder
		}
	}
}

// dialKey is one connection and hello with the key read from keyPath (none,
// for a holder from before keys, when there is no file); it returns the key it
// showed.
func dialKey(ctx context.Context, path, keyPath string) (*conn, hello, []byte, error) {
	key, err := datadir.ReadFile(keyPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, hello{}, nil, fmt.Errorf("holder: key: %w", err)
	}
	if afterKeyRead != nil {
		afterKeyRead()
	}
	c, peer, err := hail(ctx, path, key)
	return c, peer, key, err
}

// afterKeyRead, when set (by tests only), runs between reading the key and
// connecting: where a new holder can write another.
var afterKeyRead func()

// hail connects to the holder at path and says hello with key.
func hail(ctx context.Context, path string, key []byte) (*conn, hello, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, hello{}, fmt.Errorf("holder: dial %s: %w", path, err)
	}
	uc := nc.(*net.UnixConn)
	if err := checkPeer(uc); err != nil {
		uc.Close()
		return nil, hello{}, err
	}
	c := newConn(uc)
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := c.sendJSON(kindHello, hello{Proto: Proto, Key: string(key), PID: os.Getpid()}); err != nil {
		c.close()
		return nil, hello{}, fmt.Errorf("holder: hello: %w", err)
	}
	kind, body, files, err := c.recv()
	closeAll(files)
	if err != nil {
		c.close()
		return nil, hello{}, fmt.Errorf("holder: hello: %w", err)
	}
	var peer hello
	if kind == kindReply { // the holder refused us
		var r reply
		_ = jsonUnmarshal(body, &r)
		c.close()
		if r.Error == "" {
			r.Error = "refused"
		}
		if r.Denied {
			return nil, hello{}, fmt.Errorf("%w: %s", ErrDenied, r.Error)
		}
		return nil, hello{}, fmt.Errorf("%w: %s", ErrVersion, r.Error)
	}
	if kind != kindHello || jsonUnmarshal(body, &peer) != nil {
		c.close()
		return nil, hello{}, fmt.Errorf("%w: bad hello", ErrProtocol)
	}
	if peer.Proto != Proto {
		c.close()
		return nil, hello{}, fmt.Errorf("%w: the holder speaks protocol %d, this agent %d: restart the holder with this binary (that ends its sessions) or run a matching agent", ErrVersion, peer.Proto, Proto)
	}
	return c, peer, nil
}

// HolderVersion is the holder binary's version and PID, as it said in its hello.
func (c *Client) HolderVersion() (version string, pid int) { return c.peer.Version, c.peer.PID }

// Dir is the holder's directory (its socket and key).
func (c *Client) Dir() string { return filepath.Dir(c.path) }

// Close closes the request connection; the holder and its sessions stay.
func (c *Client) Close() error { return c.c.close() }

// call sends one request and reads its reply and files.
func (c *Client) call(ctx context.Context, req request, files ...*os.File) (reply, []*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { c.c.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := c.c.sendJSON(kindRequest, req, files...); err != nil {
		return reply{}, nil, fmt.Errorf("holder: %s: %w", req.Op, err)
	}
	var r reply
	got, err := c.c.recvJSON(kindReply, &r)
	if err != nil {
		if ctx.Err() != nil {
			// The reply may still come: this connection is out of step now.
			c.c.close()
			return reply{}, nil, ctx.Err()
		}
		return reply{}, nil, fmt.Errorf("holder: %s: %w", req.Op, err)
	}
	if r.Error != "" {
		closeAll(got)
		if r.NotFound {
			return r, nil, fmt.Errorf("%w: %s", ErrNoSession, req.ID)
		}
		return r, nil, fmt.Errorf("holder: %s", r.Error)
	}
	if len(got) != r.FDs {
		closeAll(got)
		return reply{}, nil, fmt.Errorf("%w: %d fds, want %d", ErrProtocol, len(got), r.FDs)
	}
	return r, got, nil
}

// Spawn starts a session's program on a new PTY in the holder. files are passed
// to the child as sp.ChildFDs (and, with sp.Keep, one more that the holder keeps);
// the caller still owns and closes its copies. It returns the session and a copy of
// the master (non-blocking) for ioctls and input; the holder reads it, never the
// caller.
func (c *Client) Spawn(ctx context.Context, sp Spawn, files ...*os.File) (Info, *os.File, error) {
	r, got, err := c.call(ctx, request{Op: "spawn", ID: sp.ID, Spawn: &sp}, files...)
	if err != nil {
		return Info{}, nil, err
	}
	if r.Info == nil || len(got) != 1 {
		closeAll(got)
		return Info{}, nil, fmt.Errorf("%w: spawn reply", ErrProtocol)
	}
	return *r.Info, got[0], nil
}

// List returns the holder's sessions (running, and exited ones not closed yet).
func (c *Client) List(ctx context.Context) ([]Info, error) {
	r, _, err := c.call(ctx, request{Op: "list"})
	return r.List, err
}

// Signal signals every process of the session.
func (c *Client) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	_, _, err := c.call(ctx, request{Op: "signal", ID: id, Signal: int(sig)})
	return err
}

// SetMeta replaces the agent's description of session id (Spawn.Meta).
func (c *Client) SetMeta(ctx context.Context, id string, meta []byte) error {
	_, _, err := c.call(ctx, request{Op: "meta", ID: id, Meta: meta})
	return err
}

// CloseSession ends the session in the holder (SIGHUP, SIGKILL after a grace, when
// it still runs) and forgets it; its streams end. It blocks until then.
func (c *Client) CloseSession(ctx context.Context, id string) (Info, error) {
	r, _, err := c.call(ctx, request{Op: "close", ID: id})
	if err != nil {
		return Info{}, err
	}
	if r.Info == nil {
		return Info{}, fmt.Errorf("%w: close reply", ErrProtocol)
	}
	return *r.Info, nil
}

// Stream is one attach: the session's output from an offset, then its exit. An
// attach of the same session that names the stream's epoch (a restarted agent
// that listed it, or one taking its stream back) ends this one.
type Stream struct {
	Info  Info
	Nonce string // the shell integration's nonce ("" without one)
	From  int64  // the offset the stream starts at (later than asked when the ring lost it)
	// Epoch is the stream's: the attach that ends it names it.
	Epoch uint64
	// Master is a copy of the PTY master (non-blocking): for ioctls and input, never
	// for reading. Kept is the guard channel's agent end, or nil. The caller owns
	// both.
	Master, Kept *os.File

	c *conn
}

// Chunk is what Next returns: output at Off, or (Exited) the end of the session.
type Chunk struct {
	Off    int64
	Data   []byte // valid until the next call of Next
	Exited bool
	Code   *int // with Exited: the exit code (nil: unknown)
}

// Attach opens a stream of session id's output from offset from. epoch is the
// session's epoch as the caller knows it: 0 when nobody is attached to it (else
// ErrStale), or the epoch of the stream to end (its own, or one List showed;
// ErrStale when another attach came since).
func (c *Client) Attach(ctx context.Context, id string, from int64, epoch uint64) (*Stream, error) {
	hc, _, err := dial(ctx, c.path)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { hc.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := hc.sendJSON(kindRequest, request{Op: "attach", ID: id, From: from, Epoch: epoch}); err != nil {
		hc.close()
		return nil, fmt.Errorf("holder: attach: %w", err)
	}
	var r reply
	files, err := hc.recvJSON(kindReply, &r)
	if err != nil {
		hc.close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("holder: attach: %w", err)
	}
	if r.Error != "" || r.Info == nil || len(files) != r.FDs || len(files) < 1 {
		closeAll(files)
		hc.close()
		if r.NotFound {
			return nil, fmt.Errorf("%w: %s", ErrNoSession, id)
		}
		if r.Stale {
			return nil, fmt.Errorf("%w (%s)", ErrStale, r.Error)
		}
		return nil, fmt.Errorf("holder: attach: %s", r.Error)
	}
	_ = hc.c.SetDeadline(time.Time{})
	st := &Stream{Info: *r.Info, Nonce: r.Nonce, From: r.From, Epoch: r.Epoch, Master: files[0], c: hc}
	if len(files) > 1 {
		st.Kept = files[1]
	}
	return st, nil
}

// Next blocks until the next chunk of output or the exit. After the exit, and
// after Close, it returns ErrClosed.
func (st *Stream) Next() (Chunk, error) {
	kind, body, files, err := st.c.recv()
	closeAll(files)
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return Chunk{}, ErrClosed
		}
		return Chunk{}, err
	}
	return parseChunk(kind, body)
}

// parseChunk decodes a stream message.
func parseChunk(kind byte, body []byte) (Chunk, error) {
	switch kind {
	case kindOutput:
		if len(body) < 8 {
			return Chunk{}, fmt.Errorf("%w: short output", ErrProtocol)
		}
		off := binary.BigEndian.Uint64(body[:8])
		if off > 1<<62 {
			return Chunk{}, fmt.Errorf("%w: output offset %d", ErrProtocol, off)
		}
		return Chunk{Off: int64(off), Data: body[8:]}, nil
	case kindExit:
		var x exitInfo
		if err := jsonUnmarshal(body, &x); err != nil {
			return Chunk{}, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		if x.End < 0 {
			return Chunk{}, fmt.Errorf("%w: exit at offset %d", ErrProtocol, x.End)
		}
		return Chunk{Off: x.End, Exited: true, Code: x.Code}, nil
	}
	return Chunk{}, fmt.Errorf("%w: message %q on a stream", ErrProtocol, kind)
}

// Close ends the stream (Next returns ErrClosed); the session stays in the holder.
// It does not close Master or Kept.
func (st *Stream) Close() error { return st.c.close() }
