// Package session runs one program in a PTY and turns its output into a byte-exact,
// offset-addressed stream, command blocks (with shell integration) and a screen.
//
// An idle session parks one goroutine, the read loop (PTY or holder stream), plus
// the guard channel's reader with a Guard (guard.go); the exits of local programs
// are watched by one goroutine for the whole process (exits.go), a session in a
// holder learns its exit from its stream (the read path: ingest.go). Everything
// else runs only while there is work: the kernel state sampler on a timer while
// the session is not idle at its prompt (state.go), the guard's worker while a
// request waits, the screen feeder while a full-screen program draws (screen.go),
// and followers such as the node's publisher on Config.Notify. An idle session
// holds no read buffer (ptyio.Reader), no screen emulator and only the output
// it had (the ring grows). The read loop never waits on anyone: it appends
// to the scrollback ring under a short lock and wakes whoever is interested; viewers,
// the screen emulator and waiters each catch up at their own pace. Close stops all of
// them and waits.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/holder"
	"github.com/fleetmux/fleetmux/internal/ring"
	"github.com/fleetmux/fleetmux/internal/sandbox"
)

// Defaults for zero Config fields.
const (
	DefaultCols            = 120
	DefaultRows            = 40
	DefaultScrollbackBytes = 8 << 20
	DefaultSettle          = 150 * time.Millisecond

	inputTimeout = 10 * time.Second
	closeGrace   = 2 * time.Second
	// hupEvery is how often Close repeats the SIGHUP within the grace: bash can
	// take one just before it blocks in readline's pselect and then wait there for
	// input, so one SIGHUP is sometimes lost (about 1 close in 100 right after a
	// command); the next one interrupts the pselect.
	hupEvery  = 100 * time.Millisecond
	readChunk = 32 << 10
)

// Config describes a session to start. The zero value of every field is a sensible
// default; Start validates the rest.
type Config struct {
	// ID names the session in logs and in FLEETMUX_SESSION; optional.
	ID string
	// Shell is "bash" or "zsh" (or a path to one) to run with shell integration. When
	// empty, Argv runs without it; when both are empty, bash is used.
	Shell string
	// Argv is the program to run without shell integration, when Shell is empty.
	Argv []string
	// Dir is the working directory; default the user's home directory.
	Dir string
	// User, when set, runs the program as this local user (uid, gid, groups, and
	// HOME, USER, LOGNAME; Dir defaults to its home). It takes root, unless it is
	// the user already running. The integration files then go to a directory of
	// that user's under os.TempDir (they hold no secret: the nonce comes over fd 3).
	User string
	// Env is added to BaseEnv ("KEY=VALUE"; later entries win).
	Env []string
	// BaseEnv is the starting environment; nil means os.Environ(). Secrets in it
	// (api.SecretEnv) are always left out.
	BaseEnv []string
	// Cols and Rows are the initial terminal size (default 120x40).
	Cols, Rows int
	// ScrollbackBytes is the most output the ring of newest output holds (default
	// 8 MiB); it grows to that as output arrives.
	ScrollbackBytes int
	// RuntimeDir holds the per-session shell integration files, which are deleted as
	// soon as the shell has read them (default os.TempDir()).
	RuntimeDir string
	// Settle is how long output must be quiet, with the foreground program waiting for
	// input, before a command typed into a program without shell integration counts as
	// finished (default 150ms).
	Settle time.Duration
	// Title, Description and Labels are free-form metadata kept with the session.
	Title, Description string
	Labels             map[string]string
	// Logger receives operational logs; default slog.Default().
	Logger *slog.Logger
	// Redactor, when set, replaces secrets in the output from the first byte on,
	// before it gets offsets, and in command text (see SetRedactor, redact.go).
	Redactor Redactor
	// Guard, when set, is asked whether each command line typed at an integrated
	// shell's prompt (bash, zsh) may run, before any of it runs; a line it denies
	// does not run, the shell says why, and its block ends without an exit code
	// (Note: api.NoteDenied and the rule). It is called from a goroutine of the
	// session, one line at a time, and may block (an approval) until ctx ends: the
	// shell asked about a newer line, or the session closes. nil: no checks, and the
	// shells run without the guard's hooks. Programs without integration are not
	// checked. See guard.go for the channel and what it does not stop. Unaccepted(ctx)
	// tells a command run before a line is accepted from a line.
	Guard func(ctx context.Context, line string) GuardVerdict
	// Sandbox, when set, confines the program with the kernel as the profile
	// says (package internal/sandbox): it starts through the sandbox wrapper,
	// and Start fails with ErrSandbox when that cannot confine it. Hide are
	// paths the program may neither read nor write, with or without a profile
	// (where the kernel has Landlock). Both are fixed for the session's life.
	Sandbox *api.SandboxProfile
	Hide    []string
	// Write are more paths the program may read and write even below a Hide
	// path or outside the profile's (e.g. an agent's own config directory).
	Write []string
	// Holder, when set, runs the program in that holder process (package holder),
	// so it outlives this one; ID is then required and names it there. See
	// holder.go (here) for what differs, Detach and Reattach. nil: a local PTY.
	Holder *holder.Client
	// Notify, when set, is called at every change a follower would wake for
	// (output, a mark, an event, the exit, Close): at once, or while a Run or
	// WaitBlock caller waits up to FollowDelay late, when Followed's channel
	// closes. noted is false when the changes since the last call were plain
	// output (no event can be new). It is called with the session's lock held,
	// possibly before Start or Reattach returns: it must not block or call the
	// session, only hand off (start or wake a worker that then looks:
	// Viewer.TryNext, Events). Followers that use it need no goroutine of their own
	// while nothing happens.
	Notify func(noted bool)
}

// Session is one running PTY session. All methods are safe for concurrent use.
type Session struct {
	cfg        Config
	log        *slog.Logger
	shell      string // "bash", "zsh" or "" (no integration)
	argv       []string
	master     *os.File
	tty        string // slave path, e.g. /dev/pts/3
	cmd        *exec.Cmd
	pid        int
	integ      *integrationDir
	sandbox    *api.SandboxProfile // the profile it runs under, nil for none
	scanner    *markScanner        // owned by the read loop
	screen     *screen
	createdAt  time.Time
	integrated bool
	image      procImage // the shell's process image at start (an exec changes it); zero while not known (see applyMarkLocked)

	writeMu sync.Mutex // serializes writes to the master
	metaMu  sync.Mutex // serializes sending the metadata to the holder (taken before mu)
	runMu   sync.Mutex // serializes Run submissions

	mu            sync.Mutex // guards everything below
	ring          *ring.Ring
	changed       chan struct{} // closed and replaced on every change (output, marks, state), if taken: see changedLocked
	changedTaken  bool          // changed was handed to a possible waiter since it was made
	noted         chan struct{} // the same, but not for plain output (a flood wakes only readers of it)
	follow        follow        // the same for followers, held back while a caller waits
	closed        bool
	exited        bool
	exitCode      *int
	readDone      bool
	cols, rows    int
	title         string
	description   string
	labels        map[string]string
	cwd           string
	paste         bool        // bracketed paste mode of the foreground program
	alt           []altToggle // recent alternate screen switches, oldest first (bounded)
	seenPrompt    bool
	integRemoved  bool
	guard         *guard             // nil without Config.Guard
	guarding      int                // guard requests received and not answered yet
	guardAsked    time.Time          // when the latest guard request came
	guardAnswered time.Time          // when the latest guard answer was decided
	guardAwait    bool               // the shell was answered and has not said yet what it made of it (C, D, N or R)
	guardMarks    uint64             // counts the C, D, N and R marks (a shell that moved on since it asked)
	guardKey      uint64             // the newest line the shell asked the guard about
	guardAbort    context.CancelFunc // ends the decision for guardKey, while one runs
	guardAbortAny bool               // guardAbort's is an unaccepted command's: any request ends it
	denied        *denial            // the guard's latest "no", until the line's end mark
	atPrompt      bool
	inputOff      int64 // offset of the latest B (or A) mark: where typed input echoes
	blocks        []*Block
	cur           *Block // open block started by the shell (C seen, D not yet)
	pending       *Block // block submitted by Run at the prompt, C not yet seen
	fallback      *fallbackRun
	lastExit      *int
	shellStatus   *int // the shell's $? at its last D or N mark
	lastReprompt  int  // the number of the last R mark (bash's prompt count)
	lost          bool // the session's shell runs without our hooks (see sample)
	lastOutput    time.Time
	waiting       bool   // foreground process is blocked reading the terminal (last sample)
	waitGen       uint64 // bumped by forgetWaitingLocked: samples taken before are stale
	waitCand      bool   // a shell block's program was seen waiting once, at output end waitCandEnd
	waitCandEnd   int64
	waitCandAt    time.Time
	waitByShell   bool         // the last sample's reader was the shell itself (see sample)
	inputStale    bool         // input reached a running block and no sample has seen its program wait since (see Input)
	inputAt       time.Time    // when, for inputSettle
	inflight      atomic.Bool  // the read loop holds a chunk it has not ingested yet
	awaited       atomic.Int32 // Run and WaitBlock callers waiting for a block (see Awaited)
	echo          bool
	polled        bool // the kernel state has been sampled at least once
	state         State
	events        []Event
	eventSeq      uint64

	hold         *held        // nil: a local PTY; see holder.go
	ckpts        []checkpoint // a session in a holder: where a replay can begin (checkpoint.go)
	ckptWant     bool         // a block started or ended since the last checkpoint (checkpoint.go)
	rawIn        int64        // a session in a holder: the holder's offset of the output ingested so far
	metaDirty    bool         // the holder's copy of the metadata is older than ours
	metaSending  bool         // metaTimer is set or its step (metaSender) runs
	metaTimer    *time.Timer  // runs metaSender; made at the first send
	redact       Redactor     // nil: none; see redact.go
	releaseArmed bool         // the release timer was set for held-back bytes (redact.go)

	poll sampler // the kernel state sampler's timers (state.go)
	stop chan struct{}
	wg   sync.WaitGroup // every goroutine of the session, and every set timer of poll
}

// fallbackRun is a command typed into a program without shell integration.
type fallbackRun struct {
	block     *Block
	submitted time.Time
}

// Start starts a session. The returned session is running; Close releases it.
func Start(cfg Config) (*Session, error) {
	s := &Session{cfg: cfg, log: cfg.Logger, createdAt: time.Now().UTC()}
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg.ID != "" {
		s.log = s.log.With("session", cfg.ID)
	}
	argv, shell, err := resolveProgram(cfg)
	if err != nil {
		return nil, err
	}
	s.argv, s.shell, s.integrated = argv, shell, shell != ""
	var as *runAs
	if cfg.User != "" {
		if as, err = lookupUser(cfg.User); err != nil {
			return nil, err
		}
		if cfg.Dir == "" {
			cfg.Dir = "/"
			if st, err := os.Stat(as.home); err == nil && st.IsDir() {
				cfg.Dir = as.home
			}
		}
	}
	dir, err := resolveDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	env, err := buildEnv(cfg)
	if err != nil {
		return nil, err
	}
	if as != nil {
		env = append(env, as.env()...)
	}
	s.cols, s.rows = cfg.Cols, cfg.Rows
	if s.cols == 0 {
		s.cols = DefaultCols
	}
	if s.rows == 0 {
		s.rows = DefaultRows
	}
	if s.cols < 1 || s.rows < 1 || s.cols > 1000 || s.rows > 1000 {
		return nil, fmt.Errorf("%w: size %dx%d (want 1..1000)", ErrBadConfig, s.cols, s.rows)
	}
	sb := cfg.ScrollbackBytes
	if sb == 0 {
		sb = DefaultScrollbackBytes
	}
	if sb < 4096 || sb > 1<<30 {
		return nil, fmt.Errorf("%w: scrollback %d bytes (want 4 KiB..1 GiB)", ErrBadConfig, sb)
	}
	if s.cfg.Settle <= 0 {
		s.cfg.Settle = DefaultSettle
	}
	s.initLocked(sb, 0)
	s.redact = cfg.Redactor
	s.title, s.description, s.labels = cfg.Title, cfg.Description, copyLabels(cfg.Labels)
	s.cwd = dir
	s.state = StateStarting

	if s.integrated {
		rt := cfg.RuntimeDir
		if rt == "" || as != nil {
			rt = os.TempDir() // as.give makes the files the user's
		}
		// The shell gets paths into it (--rcfile, ZDOTDIR) and runs in another cwd.
		if rt, err = filepath.Abs(rt); err != nil {
			return nil, fmt.Errorf("%w: runtime dir: %w", ErrBadConfig, err)
		}
		if s.integ, err = writeIntegration(rt, shell, cfg.Guard != nil); err != nil {
			return nil, err
		}
		if as != nil {
			if err := as.give(s.integ.dir); err != nil {
				s.integ.remove()
				return nil, err
			}
		}
		s.scanner = newMarkScanner(s.integ.nonce)
		switch shell {
		case "bash":
			argv = append(argv, "--rcfile", filepath.Join(s.integ.dir, "bashrc"), "-i")
		case "zsh":
			argv = append(argv, "-i")
			if v, ok := lookupEnv(env, "ZDOTDIR"); ok {
				env = append(env, "FLEETMUX_USER_ZDOTDIR="+v)
			}
			env = append(env, "ZDOTDIR="+s.integ.dir)
		}
	} else {
		s.scanner = newMarkScanner("")
		s.scanner.osc133, s.scanner.osc7 = nil, nil // no marks without integration, only modes
	}

	s.sandbox = cfg.Sandbox
	var wrap *sandbox.Wrapped
	if cfg.Sandbox != nil || len(cfg.Hide) > 0 {
		if wrap, err = s.wrap(argv, as); err != nil {
			s.integ.remove()
			return nil, err
		}
		argv = wrap.Argv
	}
	if cfg.Holder != nil {
		return s.startInHolder(argv, dir, env, as, wrap)
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		s.integ.remove()
		return nil, fmt.Errorf("%w: open pty: %v", ErrStart, err)
	}
	s.tty = tty.Name()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(s.cols), Rows: uint16(s.rows)}); err != nil {
		ptmx.Close()
		tty.Close()
		s.integ.remove()
		return nil, fmt.Errorf("%w: set size: %v", ErrStart, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, dedupEnv(env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if wrap != nil && len(cfg.Hide) > 0 {
		sandbox.Unprivileged(cmd.SysProcAttr) // its mounts, on a node without root
	}
	if as != nil {
		if wrap == nil { // else the wrapper drops to the user once it confined itself
			cmd.SysProcAttr.Credential = as.credential()
		}
		if err := as.give(s.tty); err != nil {
			ptmx.Close()
			tty.Close()
			s.integ.remove()
			return nil, err
		}
	}
	var nonceFile, guardFile *os.File // the shell's fds nonceFD and guardFD (integration.go, guard.go); ours close after Start
	var guardConn *net.UnixConn
	guardKeep := -1
	if s.integrated {
		if nonceFile, err = nonceSocket(s.integ.nonce); err != nil {
			ptmx.Close()
			tty.Close()
			s.integ.remove()
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
		cmd.ExtraFiles = make([]*os.File, nonceFD-2) // ExtraFiles[i] is the child's fd 3+i
		cmd.ExtraFiles[nonceFD-3] = nonceFile
		if cfg.Guard != nil {
			if guardConn, guardFile, guardKeep, err = guardSocket(); err != nil {
				nonceFile.Close()
				ptmx.Close()
				tty.Close()
				s.integ.remove()
				return nil, fmt.Errorf("%w: %v", ErrStart, err)
			}
			cmd.ExtraFiles = append(cmd.ExtraFiles, make([]*os.File, guardFD-2-len(cmd.ExtraFiles))...)
			cmd.ExtraFiles[guardFD-3] = guardFile
		}
	}
	if wrap != nil {
		for len(cmd.ExtraFiles) < sandbox.FD-3 {
			cmd.ExtraFiles = append(cmd.ExtraFiles, nil)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, wrap.Child...)
	}
	err = cmd.Start()
	if wrap != nil {
		wrap.CloseChild()
		if err == nil {
			if werr := wrap.Wait(sandboxWait); werr != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				err = fmt.Errorf("%w: %w", ErrSandbox, werr)
			}
		}
	}
	if nonceFile != nil {
		nonceFile.Close()
	}
	if guardFile != nil {
		guardFile.Close()
	}
	if err != nil {
		if guardConn != nil {
			guardConn.Close()
			unix.Close(guardKeep)
		}
		ptmx.Close()
		tty.Close()
		s.integ.remove()
		if errors.Is(err, ErrSandbox) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrStart, argv[0], err)
	}
	tty.Close()
	s.cmd, s.pid = cmd, cmd.Process.Pid
	// Only Wait is left to do with cmd: what the child was given (its environment,
	// a KiB or more) is not kept for the session's life.
	cmd.Env, cmd.Args, cmd.SysProcAttr, cmd.ExtraFiles = nil, nil, nil, nil
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
	if s.integrated {
		s.image, _ = readImage(s.pid) // zero if read mid-exec: then at the first prompt
	}
	// pty.Open leaves the master in blocking mode; a non-blocking dup lets the runtime
	// poller interrupt reads on Close and handle EAGAIN on large writes.
	s.master, err = nonblockingFile(ptmx)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if guardConn != nil {
			guardConn.Close()
			unix.Close(guardKeep)
		}
		s.integ.remove()
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	s.screen = newScreen(s, s.cols, s.rows)
	s.emitLocked(Event{Kind: EventCreated, State: StateStarting})

	s.mu.Lock()
	s.setPollLocked(0) // the sampler runs until the shell is idle at its prompt
	s.mu.Unlock()
	s.wg.Add(2) // the read loop, and the exit work (exits.go)
	go s.readLoop()
	if err := exits.watch(s); err != nil {
		s.log.Debug("exit not watched with the others: the session waits on its own", "err", err)
		go s.exitWork(true)
	}
	if guardConn != nil {
		s.guard = newGuard(s, guardConn, guardKeep, s.integ.nonce, cfg.Guard)
		s.wg.Add(1)
		go s.guard.readLoop() // it starts the worker when a request comes
	}
	s.log.Debug("session started", "pid", s.pid, "argv", argv, "tty", s.tty)
	return s, nil
}

// initLocked makes the ring (its first offset base) and the channels of a new
// session.
func (s *Session) initLocked(scrollback int, base int64) {
	s.ring = ring.NewAt(scrollback, base)
	s.changed = make(chan struct{})
	s.noted = make(chan struct{})
	s.follow.init()
	s.redact = s.cfg.Redactor
	s.stop = make(chan struct{})
	s.state = StateStarting
}

func copyLabels(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// recordExit records the program's exit (code nil: unknown) and ends what is open.
func (s *Session) recordExit(code *int) {
	s.mu.Lock()
	s.flushRedactLocked() // the program's last output belongs to its blocks
	s.exited = true
	s.exitCode = code
	off := s.ring.End()
	if s.cur != nil {
		// The shell exited inside a command (`exit 3`): its status is the command's.
		s.finishBlockLocked(s.cur, off, s.exitCode, NoteExited)
		s.cur = nil
	}
	if s.pending != nil {
		s.finishBlockLocked(s.pending, off, nil, NoteExited)
		s.pending = nil
	}
	if s.fallback != nil {
		s.finishBlockLocked(s.fallback.block, off, nil, NoteExited)
		s.fallback = nil
	}
	s.updateStateLocked()
	s.emitLocked(Event{Kind: EventExited, ExitCode: s.exitCode})
	s.broadcastLocked()
	s.mu.Unlock()
	s.integ.remove()
	s.log.Debug("session process exited", "code", code)
}

// Close stops the process and every goroutine of the
// session and waits for them. The process group (the shell and all its jobs) gets
// SIGHUP (repeated: see hupEvery), then SIGKILL after a short grace. Close is
// idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	exited := s.exited
	s.stopPollLocked()
	s.broadcastLocked()
	s.mu.Unlock()

	if s.hold != nil {
		// The holder hangs the session up and kills what is left: it is the
		// program's parent, and knows whether its pid is still the session's.
		s.closeHeld()
	} else {
		if !exited {
			s.hangUp()
		}
		// Background jobs may outlive the shell and keep the PTY open; they go
		// too. The shell is not reaped yet (exitWork): the ids are still its.
		killSession(s.pid, syscall.SIGKILL)
	}
	close(s.stop)
	s.master.Close()
	if s.guard != nil {
		s.guard.stop()
	}
	s.wg.Wait()
	if s.cmd != nil {
		_ = s.cmd.Wait() // exitWork saw it exit: its zombie goes now, with nothing left to signal
	}
	s.screen.close()
	s.integ.remove()
	return nil
}

// hangUp sends SIGHUP to the session, again every hupEvery, until the shell has
// exited or closeGrace has passed, and then SIGKILL. It blocks until then.
func (s *Session) hangUp() {
	deadline := time.Now().Add(closeGrace)
	for {
		killSession(s.pid, syscall.SIGHUP)
		left := time.Until(deadline)
		if s.waitExited(min(hupEvery, left)) {
			return
		}
		if left <= hupEvery {
			killSession(s.pid, syscall.SIGKILL)
			return
		}
	}
}

func (s *Session) waitExited(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		s.mu.Lock()
		exited, ch := s.exited, s.noted
		s.mu.Unlock()
		if exited {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		}
	}
}

// broadcastLocked wakes everyone waiting for a change.
func (s *Session) broadcastLocked() {
	close(s.noted)
	s.noted = make(chan struct{})
	s.wakeChangedLocked()
	s.followLocked(true)
}

// broadcastOutputLocked wakes those waiting for output (and any change): new
// output with no mark in it changes nothing else.
func (s *Session) broadcastOutputLocked() {
	s.wakeChangedLocked()
	s.followLocked(false)
}

func (s *Session) wakeChangedLocked() {
	if s.changedTaken { // else nobody can be waiting on it: keep it (a flood reads thousands of chunks a second)
		close(s.changed)
		s.changed = make(chan struct{})
		s.changedTaken = false
	}
}

// changedLocked returns the channel closed at the next change, for a caller about to
// wait on it.
func (s *Session) changedLocked() chan struct{} {
	s.changedTaken = true
	return s.changed
}

// usableLocked returns the error for using a closed or exited session.
func (s *Session) usableLocked() error {
	if s.closed {
		return ErrClosed
	}
	if s.exited {
		return ErrExited
	}
	return nil
}

// Input writes raw bytes to the terminal, as if typed.
func (s *Session) Input(p []byte) error {
	if len(p) > api.MaxInputBytes {
		return fmt.Errorf("%w: input of %d bytes (limit %d)", ErrTooLarge, len(p), api.MaxInputBytes)
	}
	s.mu.Lock()
	err := s.usableLocked()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.write(p); err != nil {
		return err
	}
	s.mu.Lock()
	if s.cur != nil || s.fallback != nil {
		// The program was given something to do: it may act on it (quit, and
		// the shell read the terminal next), so the last sample's "waiting" no
		// longer says who would read what Run types. Run waits for the next one.
		s.forgetWaitingLocked()
		s.inputStale, s.inputAt = true, time.Now()
		s.kickPollerLocked(true)
	}
	s.mu.Unlock()
	return nil
}

// SendKeys writes named keys (see KeyBytes). Nothing is written if any name is bad.
func (s *Session) SendKeys(names ...string) error {
	b, err := KeysBytes(names)
	if err != nil {
		return err
	}
	return s.Input(b)
}

// write writes all of p to the master, waiting at most inputTimeout for the terminal
// to accept it. Writes are serialized so concurrent inputs never interleave.
func (s *Session) write(p []byte) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_ = s.master.SetWriteDeadline(time.Now().Add(inputTimeout))
	_, err := s.master.Write(p)
	s.mu.Lock()
	s.kickPollerLocked(true) // typed input: sample soon (held while a Run waits)
	s.mu.Unlock()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: the program is not reading its terminal", ErrInputTimeout)
	case errors.Is(err, os.ErrClosed):
		return ErrClosed
	}
	return fmt.Errorf("session: write: %w", err)
}

// Resize changes the terminal size; the program gets SIGWINCH.
func (s *Session) Resize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > 1000 || rows > 1000 {
		return fmt.Errorf("%w: size %dx%d (want 1..1000)", ErrBadConfig, cols, rows)
	}
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	if err := masterControl(s.master, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	}); err != nil {
		return fmt.Errorf("session: resize: %w", err)
	}
	s.screen.resize(cols, rows)
	s.mu.Lock()
	s.cols, s.rows = cols, rows
	s.emitLocked(Event{Kind: EventResized, Cols: cols, Rows: rows})
	s.broadcastLocked()
	s.mu.Unlock()
	s.setHeldMeta()
	return nil
}

// SetInfo updates the session's metadata; nil fields are left unchanged.
func (s *Session) SetInfo(title, description *string, labels map[string]string) {
	defer s.setHeldMeta() // a reattach finds them
	s.mu.Lock()
	defer s.mu.Unlock()
	if title != nil {
		s.title = *title
	}
	if description != nil {
		s.description = *description
	}
	if labels != nil {
		s.labels = copyLabels(labels)
	}
	s.emitLocked(Event{Kind: EventInfo})
	s.broadcastLocked()
}

// Read returns up to max bytes of output starting at offset from. It returns a
// *TruncatedError (ErrTruncated) when from is older than the scrollback holds, and no
// bytes when from is at or past the end.
func (s *Session) Read(from int64, max int) ([]byte, error) {
	if from < 0 {
		return nil, fmt.Errorf("%w: negative offset %d", ErrBadConfig, from)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return readScrollback(s.ring, from, max)
}

// Offsets returns the oldest offset still in scrollback and the end of the output.
func (s *Session) Offsets() (oldest, end int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring.Start(), s.ring.End()
}

// Pid is the process id of the session's program.
func (s *Session) Pid() int { return s.pid }
