package session

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
)

// The guard: an integrated shell asks, before a command line typed at its prompt runs,
// whether it may run (Config.Guard), and does not run it when the answer is no.
//
// The channel. The shell inherits one end of a socket pair as fd guardFD, which its rc
// moves to a descriptor of its own; the session holds the other end. A shell cannot
// keep a descriptor from the programs it starts (bash and zsh have no close-on-exec
// for their own fds), so every child holds the shell's end too. The protocol is built
// so that holding it gains a child nothing but the power to make the shell wait:
//
//   - A request is "Q NONCE KEY CHALLENGE KIND\n" and the line, ended by a NUL. The
//     nonce is the session's (in the shell's memory only: never in argv, environ or a
//     file, so a program the shell started does not know it); the session ignores a
//     request without it. The shell's subshells (a line starting with `( … )` is first
//     checked in one) are the shell's own code and know it.
//   - The session reads with SO_PASSCRED, so the kernel tells it which process wrote
//     each byte and never merges two writers' bytes in one read. A request is
//     reassembled from one process's bytes only: a child writing into the socket while
//     the shell writes a request (to splice words into it) only fills a buffer of its
//     own, which never holds the nonce.
//   - An answer is "fm\tCHALLENGE\tVERDICT\tRULE\tMESSAGE\n". Only the session writes
//     to the shell's read side, so a child cannot forge an answer; it can read (steal)
//     one, and then the shell waits for an answer that never comes: the line does not
//     run. The challenge is random per request (and the shell skips answers for other
//     challenges), so a late answer to an abandoned request never answers a newer one.
//   - "fm\t*\tagain\t-\t-\n" asks a shell that waits for an answer to ask again
//     (with the same challenge). A new agent sends it once it reattached: the agent
//     before it may have read a question and gone (killed, or restarted) before it
//     answered, and the shell would wait for that answer for a day. It can only make
//     the shell ask; a shell not waiting drops it with the other late answers.
//   - A child can also make the shared socket non-blocking (O_NONBLOCK belongs to
//     the open file): the shell waits for an answer with poll (read -t) before it
//     reads, and the session clears the flag at each request (unblock).
//   - Fail closed: the shell runs the line only on an answer "allow" with its
//     challenge; end of file, a read or write error, or an answer it cannot parse
//     deny it, and the shell says why.
//
// What this does not stop: a line the policy allowed runs with the shell's full power,
// and may disable the check for later lines (trap - DEBUG is put back at the next
// prompt, but `exec bash`, or replacing every hook of the integration at once, is not
// undone; a session whose integration is lost says so). Code running as the session's
// user can read the shell's memory where the kernel lets it ptrace; root can forge
// SCM_CREDENTIALS. Sessions for code that must not get around a policy run as another
// user with a policy that denies what it must (README).

// GuardVerdict is a Guard's answer for one command line.
type GuardVerdict struct {
	// Allow lets the line run.
	Allow bool
	// Rule names the policy rule that decided (shown when the line is denied).
	Rule string
	// Message says why, for the person or agent at the terminal.
	Message string
}

// guardFD is the shell's fd that carries the guard channel (exec.Cmd.ExtraFiles[1]).
const guardFD = 4

const (
	// maxGuardLine bounds one checked line: longer lines are denied (fail closed).
	maxGuardLine = api.MaxInputBytes + 1024
	// maxGuardWriters bounds the partial requests kept, one per writing process.
	maxGuardWriters = 16
	// guardAnswerTimeout bounds how long an answer may wait for room in the socket.
	guardAnswerTimeout = 5 * time.Second
	// guardRecent is how many keys' verdicts are kept, so that the shell and its
	// subshells asking about the same line get one decision. A verdict is kept with
	// the line's text and reused only for that very text under that key: code the
	// shell sources can ask about the next line numbers itself, and must not get
	// an allow for "true" that the next real line would run on.
	guardRecent = 8
	// guardAwaitFor bounds how long the session waits for the shell to act on an
	// answer (it takes milliseconds) before it trusts its prompt again.
	guardAwaitFor = time.Second
)

// guardRequest is one parsed request.
type guardRequest struct {
	key       uint64 // the line's number in the shell (bash \#, zsh a counter)
	challenge string
	line      string
	marks     uint64 // Session.guardMarks when it came
	// unaccepted: a command the shell runs while no line is accepted (readline's
	// expansions, bind -x, completion; kind "r"): decided alone, never cached by
	// key, and its denial belongs to no block.
	unaccepted bool
}

// parseGuardRequest parses one request frame (without its NUL). ok is false for a
// frame that is not a well-formed request carrying nonce.
func parseGuardRequest(frame []byte, nonce string) (req guardRequest, ok bool) {
	head, body, found := bytes.Cut(frame, []byte("\n"))
	if !found {
		return req, false
	}
	f := strings.Split(string(head), " ")
	if len(f) != 5 || f[0] != "Q" || nonce == "" ||
		subtle.ConstantTimeCompare([]byte(f[1]), []byte(nonce)) != 1 {
		return req, false
	}
	key, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil || f[3] == "" || len(f[3]) > 64 || strings.ContainsFunc(f[3], func(r rune) bool { return r < '0' || r > '9' }) {
		return req, false
	}
	req.key, req.challenge = key, f[3]
	switch f[4] {
	case "l": // the line itself
		req.line = string(body)
	case "r": // a command run while no line is accepted
		req.line, req.unaccepted = string(body), true
	case "h": // bash's `history 1`: "  NUM  LINE\n" (HISTTIMEFORMAT empty)
		line, ok := historyLine(body)
		if !ok {
			return req, false
		}
		req.line = line
	default:
		return req, false
	}
	return req, true
}

// historyLine takes the line out of one entry as bash's `history 1` prints it.
func historyLine(b []byte) (string, bool) {
	s := strings.TrimLeft(string(b), " ")
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return "", false
	}
	s = s[i:]
	// After the number: '*' for an entry edited in the history list, else a space;
	// then a space.
	if !strings.HasPrefix(s, "  ") && !strings.HasPrefix(s, "* ") {
		return "", false
	}
	return strings.TrimSuffix(s[2:], "\n"), true
}

// guardAnswer formats the answer to challenge.
func guardAnswer(challenge string, v GuardVerdict) []byte {
	verdict, rule := "allow", "-"
	if !v.Allow {
		verdict = "deny"
		if r := guardField(v.Rule, 100); r != "" {
			rule = r
		}
	}
	return []byte("fm\t" + challenge + "\t" + verdict + "\t" + rule + "\t" + guardField(v.Message, 300) + "\n")
}

// guardField makes s safe for one tab-separated field shown on a terminal: control
// characters (tabs and newlines too) become spaces, and it is cut to max runes.
func guardField(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range strings.TrimSpace(s) {
		if n == max {
			b.WriteString("…")
			break
		}
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			r = ' '
		}
		b.WriteRune(r)
		n++
	}
	return strings.TrimSpace(b.String())
}

// deniedNote is the note of a block whose line the guard denied.
func deniedNote(v GuardVerdict) string {
	if v.Rule != "" {
		return api.NoteDenied + " " + guardField(v.Rule, 100)
	}
	return api.NoteDenied
}

// guardSocket returns our end (SO_PASSCRED set) and the shell's end of the channel,
// and keep, a descriptor of the shell's end that the session keeps (see unblock).
func guardSocket() (ours *net.UnixConn, theirs *os.File, keep int, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, -1, fmt.Errorf("session: guard socket: %w", err)
	}
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, -1, fmt.Errorf("session: guard socket: %w", err)
	}
	keep, err = unix.FcntlInt(uintptr(fds[1]), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, -1, fmt.Errorf("session: guard socket: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "guard")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		syscall.Close(fds[1])
		unix.Close(keep)
		return nil, nil, -1, fmt.Errorf("session: guard socket: %w", err)
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "guard"), keep, nil
}

// guard serves the channel of one session: a reader (requests in) and a worker
// (decisions, answers out), both owned by the Session and stopped by Close (which
// closes conn and cancels ctx). The reader waits on the poller for the shell's
// next question; the worker runs only while requests are queued (the reader starts
// it), and the lapse of an answer is a timer: an idle guarded session has only the
// reader.
type guard struct {
	s      *Session
	conn   *net.UnixConn
	keep   int // the shell's end, ours too (see unblock); closed by stop
	nonce  string
	decide func(ctx context.Context, line string) GuardVerdict
	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	reqs   chan guardRequest // reader → worker
	forged bool              // a bad request was logged at warn (owned by the reader)

	mu      sync.Mutex // guards working
	working bool       // a worker runs (counted in Session.wg)
	recent  []decided  // the verdicts of the last keys (owned by the worker that runs)

	// lapse clears Session.guardAwait at lapseAt (see work); guarded by Session.mu.
	lapse      *time.Timer
	lapseAt    time.Time
	lapseArmed bool // lapse is set and its step has not started (counted in Session.wg)
}

// decided is a verdict kept for its key and the line's text (a hash of it).
type decided struct {
	key  uint64
	line [sha256.Size]byte
	v    GuardVerdict
}

func newGuard(s *Session, conn *net.UnixConn, keep int, nonce string, decide func(context.Context, string) GuardVerdict) *guard {
	ctx, cancel := context.WithCancel(context.Background())
	return &guard{s: s, conn: conn, keep: keep, nonce: nonce, decide: decide, ctx: ctx, cancel: cancel,
		reqs: make(chan guardRequest, 16)}
}

// stop ends the reader and a worker (a Guard blocked in a decision sees its ctx end). The
// connection closes first: a decision cut short is not answered (as "abandoned"), so
// after a Detach the shell still waits, and the next agent's askAgain has it ask that
// agent.
func (g *guard) stop() {
	g.conn.Close()
	g.cancel()
	unix.Close(g.keep)
}

// guardAgain is the message that has a waiting shell ask again.
var guardAgain = []byte("fm\t*\tagain\t-\t-\n")

// askAgain tells the shell to ask again about the line it waits for, if it waits:
// the agent it asked may be gone without an answer. Reattach calls it.
func (g *guard) askAgain() {
	_ = g.conn.SetWriteDeadline(time.Now().Add(guardAnswerTimeout))
	if _, err := g.conn.Write(guardAgain); err != nil && !errors.Is(err, net.ErrClosed) {
		g.s.log.Warn("guard: could not ask the shell to ask again", "err", err)
	}
}

// unblock puts the shell's end back in blocking mode. O_NONBLOCK belongs to the open
// file, which every holder shares: a program can set it, and the shell's next wait
// for an answer then fails at once (the line is denied: fail closed). The session
// clears it at each request, so a program can deny lines while it runs, no more.
func (g *guard) unblock() {
	_ = unix.SetNonblock(g.keep, false)
}

// readLoop reassembles requests per writing process and hands well-formed ones to the
// worker. It ends when the connection is closed.
func (g *guard) readLoop() {
	defer g.s.wg.Done()
	defer close(g.reqs)
	rc, err := g.conn.SyscallConn()
	if err != nil {
		return
	}
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	type partial struct {
		pid  int32
		data []byte
		bad  bool // over the limit: skip to its NUL
	}
	var parts []*partial // newest last
	for {
		// Wait on the poller holding no buffer: the shell asks once per command line.
		var bp *[]byte
		var n, oobn int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			b := guardBufs.Get().(*[]byte)
			for {
				n, oobn, _, _, rerr = unix.Recvmsg(int(fd), *b, oob, unix.MSG_CMSG_CLOEXEC)
				if rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				guardBufs.Put(b)
				return false
			}
			bp = b
			return true
		})
		if err == nil {
			err = rerr
		}
		if err == nil && n <= 0 {
			err = io.EOF // every copy of the shell's end is closed
		}
		if n > 0 {
			buf := *bp
			pid := int32(-1) // unknown writer: its bytes only ever meet unknown writers'
			if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
				for _, m := range msgs {
					if cred, cerr := unix.ParseUnixCredentials(&m); cerr == nil {
						pid = cred.Pid
					}
				}
			}
			var p *partial
			for i, q := range parts {
				if q.pid == pid {
					p = q
					parts = append(parts[:i], parts[i+1:]...)
					break
				}
			}
			if p == nil {
				p = &partial{pid: pid}
				if len(parts) >= maxGuardWriters {
					parts = parts[1:] // the oldest writer's partial request is dropped
				}
			}
			parts = append(parts, p)
			data := buf[:n]
			for len(data) > 0 {
				i := bytes.IndexByte(data, 0)
				if i < 0 {
					if !p.bad {
						p.data = append(p.data, data...)
						if len(p.data) > maxGuardLine {
							p.data, p.bad = nil, true
						}
					}
					break
				}
				if !p.bad {
					p.data = append(p.data, data[:i]...)
					g.frame(p.data)
				}
				p.data, p.bad = p.data[:0], false
				data = data[i+1:]
			}
		}
		if bp != nil {
			guardBufs.Put(bp)
		}
		if err != nil {
			return
		}
	}
}

// guardBufs are the guard readers' buffers, shared by every session: a reader takes
// one only while a request is there (a 64 KiB buffer per guarded session was held
// for its life).
var guardBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// frame handles one complete frame from one writer.
func (g *guard) frame(frame []byte) {
	if len(frame) > maxGuardLine {
		return
	}
	req, ok := parseGuardRequest(frame, g.nonce)
	if !ok {
		// Once at warn: a program could write a flood of them.
		lvl := slog.LevelDebug
		if !g.forged {
			g.forged, lvl = true, slog.LevelWarn
		}
		g.s.log.Log(context.Background(), lvl, "guard: a request without the session's nonce, or malformed: ignored (a program in the session writing to the shell's guard socket?)", "bytes", len(frame))
		return
	}
	g.unblock()
	g.s.mu.Lock()
	req.marks = g.s.guardMarks
	g.s.guarding++
	g.s.guardAsked = time.Now()
	if g.s.guardKey < req.key && !req.unaccepted || g.s.guardAbortAny {
		// The shell asks about a newer line, or asks again while an unaccepted
		// command waits: the one still being decided was abandoned (Ctrl-C while it
		// waited).
		if !req.unaccepted {
			g.s.guardKey = req.key
		}
		if g.s.guardAbort != nil {
			g.s.guardAbort()
		}
	}
	g.s.updateStateLocked()
	g.s.broadcastLocked()
	g.s.mu.Unlock()
	select {
	case g.reqs <- req:
		g.kick()
	case <-g.ctx.Done():
	}
}

// kick starts the worker unless it runs (the reader, after queueing a request; its
// own count in Session.wg is held, so the count never starts from zero here).
func (g *guard) kick() {
	g.mu.Lock()
	if !g.working {
		g.working = true
		g.s.wg.Add(1)
		go g.work()
	}
	g.mu.Unlock()
}

// work decides the queued requests one at a time and answers them, and ends once
// none is left. No request is left behind: the reader queues before it kicks, and
// the worker ends only when it finds the queue empty under mu.
func (g *guard) work() {
	defer g.s.wg.Done()
	for {
		select {
		case req, ok := <-g.reqs:
			if !ok {
				return // the reader ended
			}
			g.answer(req)
		default:
			g.mu.Lock()
			if len(g.reqs) == 0 {
				g.working = false
				g.mu.Unlock()
				return
			}
			g.mu.Unlock()
		}
	}
}

// answer decides one request and answers it.
func (g *guard) answer(req guardRequest) {
	v, known := GuardVerdict{}, false
	sum := sha256.Sum256([]byte(req.line))
	for _, d := range g.recent {
		if d.key == req.key && d.line == sum && !req.unaccepted {
			v, known = d.v, true
		}
	}
	if !known {
		// An older key than the newest asked about comes from a subshell of an
		// earlier line (a background job): it is decided like any other.
		ctx, cancel := context.WithCancel(g.ctx)
		g.s.mu.Lock()
		if req.key == g.s.guardKey || req.unaccepted {
			g.s.guardAbort, g.s.guardAbortAny = cancel, req.unaccepted
		}
		g.s.mu.Unlock()
		if req.unaccepted {
			ctx = context.WithValue(ctx, unacceptedKey{}, true)
		}
		v = g.call(ctx, req.line)
		if ctx.Err() != nil && g.ctx.Err() == nil && !v.Allow && v.Message == "" {
			v.Message = "the line was abandoned before it was decided"
		}
		cancel()
		if !req.unaccepted {
			g.recent = append(g.recent, decided{req.key, sum, v})
			if len(g.recent) > guardRecent {
				g.recent = g.recent[1:]
			}
		}
	}
	// Decided: the session is no longer waiting for the guard once the shell can
	// go on, so the state and the denial are in place before it is told.
	g.s.mu.Lock()
	g.s.guardAbort, g.s.guardAbortAny = nil, false
	if !v.Allow && !known && !req.unaccepted {
		g.s.denied = &denial{note: deniedNote(v), line: req.line, block: g.s.openBlockLocked()}
	}
	g.s.guarding--
	g.s.guardAnswered = time.Now()
	if g.s.guarding == 0 {
		// The sampler let the shell be while it waited for us (needsPoll).
		g.s.kickPollerLocked(true)
	}
	// Unless the shell already moved on (it gave up on this answer), it acts
	// on it next: not idle until it does.
	// (An unaccepted command is no line: no mark follows.)
	g.s.guardAwait = g.s.guardMarks == req.marks && !req.unaccepted
	g.s.updateStateLocked()
	g.s.broadcastLocked()
	// An answer the shell no longer waited for (it gave up: a stolen answer, a
	// socket made non-blocking) leaves guardAwait set with no mark to clear it:
	// it lapses after guardAwaitFor.
	g.lapseAt = time.Now().Add(guardAwaitFor)
	g.setLapseLocked(guardAwaitFor)
	g.s.mu.Unlock()
	_ = g.conn.SetWriteDeadline(time.Now().Add(guardAnswerTimeout))
	_, err := g.conn.Write(guardAnswer(req.challenge, v))
	if err != nil && !errors.Is(err, net.ErrClosed) {
		g.s.log.Warn("guard: answer not written", "err", err)
	}
}

// setLapseLocked makes the lapse step run in d, unless it is set already (it
// looks at lapseAt when it runs). Session.mu is held.
func (g *guard) setLapseLocked(d time.Duration) {
	if g.lapseArmed || g.s.closed {
		return
	}
	g.lapseArmed = true
	g.s.wg.Add(1)
	if g.lapse == nil {
		g.lapse = time.AfterFunc(d, g.lapseStep)
	} else {
		g.lapse.Reset(d)
	}
}

// lapseStep runs on the lapse timer's goroutine: the shell did not act on its
// answer within guardAwaitFor, and the session trusts its prompt again.
func (g *guard) lapseStep() {
	defer g.s.wg.Done()
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	g.lapseArmed = false
	if d := time.Until(g.lapseAt); d > 0 {
		g.setLapseLocked(d) // a newer answer: its lapse
		return
	}
	if s.guardAwait {
		s.guardAwait = false
		s.updateStateLocked()
		s.broadcastLocked()
	}
}

// stopLapseLocked stops the lapse timer if it has not fired (Close, Detach).
func (g *guard) stopLapseLocked() {
	if g.lapseArmed && g.lapse.Stop() {
		g.lapseArmed = false
		g.s.wg.Done()
	}
}

// unacceptedKey marks the ctx of a Guard call about a command the shell runs
// while no line is accepted.
type unacceptedKey struct{}

// Unaccepted reports whether the Guard call with ctx is about a command the shell
// runs while no line is accepted (readline's expansions, bind -x, completion, zsh's
// expansion widgets): a piece of the line still being typed, not a line the shell
// accepted. Any other call is about a whole line.
func Unaccepted(ctx context.Context) bool {
	v, _ := ctx.Value(unacceptedKey{}).(bool)
	return v
}

// call runs the Guard; a Guard that panics denies.
func (g *guard) call(ctx context.Context, line string) (v GuardVerdict) {
	defer func() {
		if r := recover(); r != nil {
			g.s.log.Error("guard panicked: line denied", "panic", r)
			v = GuardVerdict{Message: "the guard failed"}
		}
	}()
	return g.decide(ctx, line)
}

// denial is the guard's latest "no", kept until the shell reports the line's end.
type denial struct {
	note  string
	line  string
	block int // the open block when it was denied (0: none, at the prompt)
}

// openBlockLocked is the number of the block the shell runs or was given, 0 if none.
func (s *Session) openBlockLocked() int {
	switch {
	case s.cur != nil:
		return s.cur.N
	case s.pending != nil:
		return s.pending.N
	}
	return 0
}

// is reports whether d is about block b: the block open when the guard said no, or
// any block when none was (bash prints the C mark before it asks, and the read loop
// may not have taken it in yet when the answer is given).
func (d *denial) is(b *Block) bool {
	return d != nil && (d.block == b.N || d.block == 0)
}
