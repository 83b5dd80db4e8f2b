package agent

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The hook channel: how `fleetmux agent-hook DIR`, run by Claude Code for each
// hook event, reaches the node that runs the agent.
//
//   - The node makes DIR (the agent's config directory, 0700) and in it a Unix
//     socket (HookSocket, 0600) and a token file (HookToken, 0600, 32 random
//     bytes in hex). Nothing of it is in argv or the agent's environment: the
//     hook command names DIR, and CLAUDE_CONFIG_DIR is DIR.
//   - A request is "FMHOOK1 TOKEN LEN\n" and LEN bytes of the event's JSON; the
//     node compares the token in constant time, checks the peer's uid
//     (SO_PEERCRED: the node's own, or root) and answers "LEN\n" and LEN bytes,
//     which the hook prints (a PermissionRequest's decision). A request with a
//     wrong token, from another uid, or larger than MaxHookEvent gets no answer.
//   - The hook keeps the connection open while it waits: when Claude Code gives
//     up on it (the person pressed Esc, the agent exited) the connection closes
//     and the node stops waiting (a held approval expires).
//
// What this stops: other users, and other agents and sessions of the same user
// (they know neither this agent's directory's token nor can they pass the
// directory's permissions as another user). What it does not: a program the
// agent itself runs (a Bash tool) runs as the agent and can read the token, as
// every child of an integrated shell holds its guard channel; it can then report
// states for its own agent, or ask about tool uses, which the policy decides as
// for the agent: it cannot answer one.

// Files of the hook channel in an agent's config directory.
const (
	HookSocket = "hook.sock"
	HookToken  = "hook.token"
)

// MaxHookEvent bounds one hook event (a Write tool's input carries the file).
const MaxHookEvent = 4 << 20

// hookMagic starts every request.
const hookMagic = "FMHOOK1"

// hookReadTimeout bounds how long the node waits for a request's bytes.
const hookReadTimeout = 10 * time.Second

// maxHookConns bounds the connections one channel serves at once.
const maxHookConns = 16

// ErrHook is wrapped by the hook channel's errors.
var ErrHook = errors.New("agent hook")

// HookHandler answers one hook event: it returns what the hook prints (nil:
// nothing). ctx ends when the hook gives up waiting.
type HookHandler func(ctx context.Context, ev HookEvent, raw []byte) []byte

// HookChannel is one agent's hook channel, the node's end. Close stops it and
// waits for its goroutines.
type HookChannel struct {
	dir   string
	token string
	ln    *net.UnixListener
	log   *slog.Logger
	uid   int

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slots  chan struct{}
}

// OpenHookChannel makes dir (0700) and the channel's socket and token in it.
func OpenHookChannel(dir string, log *slog.Logger) (*HookChannel, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHook, err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("%w: token: %v", ErrHook, err)
	}
	token := hex.EncodeToString(raw[:])
	if err := os.WriteFile(filepath.Join(dir, HookToken), []byte(token+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("%w: token: %v", ErrHook, err)
	}
	sock := filepath.Join(dir, HookSocket)
	_ = os.Remove(sock)
	var ln *net.UnixListener
	err := inDir(dir, func(addr string) error {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr + "/" + HookSocket, Net: "unix"})
		if err != nil {
			return err
		}
		l.SetUnlinkOnClose(false) // removed by its real path (Close)
		ln = l
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: listen: %v", ErrHook, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("%w: %v", ErrHook, err)
	}
	c := &HookChannel{dir: dir, token: token, ln: ln, log: log, uid: os.Geteuid(), slots: make(chan struct{}, maxHookConns)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Dir is the channel's directory.
func (c *HookChannel) Dir() string { return c.dir }

// Serve answers requests with h until Close; it returns at once (the channel
// owns its goroutines).
func (c *HookChannel) Serve(h HookHandler) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := c.ln.AcceptUnix()
			if err != nil {
				if c.ctx.Err() == nil {
					c.log.Warn("agent hook channel: accept", "dir", c.dir, "err", err)
				}
				return
			}
			select {
			case c.slots <- struct{}{}:
			default:
				conn.Close() // too many at once: the hook fails, the screen still tells
				continue
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer func() { <-c.slots }()
				c.serveConn(conn, h)
			}()
		}
	}()
}

// Close stops the channel, ends what waits on it, waits for its goroutines and
// removes its socket and token.
func (c *HookChannel) Close() {
	c.cancel()
	c.ln.Close()
	c.wg.Wait()
	_ = os.Remove(filepath.Join(c.dir, HookSocket))
	_ = os.Remove(filepath.Join(c.dir, HookToken))
}

func (c *HookChannel) serveConn(conn *net.UnixConn, h HookHandler) {
	defer conn.Close()
	if uid, err := peerUID(conn); err != nil || uid != c.uid && uid != 0 {
		c.log.Warn("agent hook channel: a peer of another user", "dir", c.dir, "uid", uid, "err", err)
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(hookReadTimeout))
	br := bufio.NewReaderSize(conn, 4096)
	head, err := br.ReadString('\n')
	if err != nil || len(head) > 256 {
		return
	}
	f := strings.Fields(head)
	if len(f) != 3 || f[0] != hookMagic || subtle.ConstantTimeCompare([]byte(f[1]), []byte(c.token)) != 1 {
		c.log.Warn("agent hook channel: a request without the agent's token", "dir", c.dir)
		return
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < 0 || n > MaxHookEvent {
		return
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(br, raw); err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	ev, err := ParseHookEvent(raw)
	if err != nil {
		c.log.Warn("agent hook channel: bad event", "dir", c.dir, "err", err)
		return
	}
	// The hook waits with the connection open: its end (EOF) ends the wait.
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_, _ = br.ReadByte()
		cancel()
	}()
	defer func() { conn.Close(); <-watched }() // runs before the deferred Close above
	out := h(ctx, ev, raw)
	_ = conn.SetWriteDeadline(time.Now().Add(hookReadTimeout))
	_, _ = conn.Write(append([]byte(strconv.Itoa(len(out))+"\n"), out...))
}

// peerUID is the uid of the process at conn's other end.
func peerUID(conn *net.UnixConn) (int, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

// inDir calls f with a short name for dir: dir itself, or /proc/self/fd/N when
// dir is too long for a Unix socket's address (108 bytes with the file name).
func inDir(dir string, f func(addr string) error) error {
	if len(dir)+len(HookSocket) < 100 {
		return f(dir)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return f("/proc/self/fd/" + strconv.Itoa(fd))
}

// SendHook is the hook program's end: it sends event (a hook's input) to the
// channel in dir and returns the node's answer (what the hook prints). It waits
// for the answer until ctx ends.
func SendHook(ctx context.Context, dir string, event []byte) ([]byte, error) {
	if len(event) > MaxHookEvent {
		return nil, fmt.Errorf("%w: event of %d bytes (limit %d)", ErrHook, len(event), MaxHookEvent)
	}
	tok, err := os.ReadFile(filepath.Join(dir, HookToken))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHook, err)
	}
	var conn net.Conn
	err = inDir(dir, func(addr string) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", addr+"/"+HookSocket)
		conn = c
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHook, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	head := hookMagic + " " + strings.TrimSpace(string(tok)) + " " + strconv.Itoa(len(event)) + "\n"
	if _, err := conn.Write(append([]byte(head), event...)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHook, err)
	}
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: no answer: %v", ErrHook, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || n < 0 || n > MaxHookEvent {
		return nil, fmt.Errorf("%w: bad answer %q", ErrHook, line)
	}
	out := make([]byte, n)
	if _, err := io.ReadFull(br, out); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHook, err)
	}
	return out, nil
}
