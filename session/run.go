package session

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Info is a snapshot of a session.
type Info struct {
	ID             string            `json:"id,omitempty"`
	Title          string            `json:"title,omitempty"`
	Description    string            `json:"description,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Shell          string            `json:"shell,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	Cwd            string            `json:"cwd"`
	Cols           int               `json:"cols"`
	Rows           int               `json:"rows"`
	State          State             `json:"state"`
	CurrentCommand string            `json:"current_command,omitempty"`
	LastExitCode   *int              `json:"last_exit_code,omitempty"`
	ExitCode       *int              `json:"exit_code,omitempty"` // the process's, once exited
	CreatedAt      time.Time         `json:"created_at"`
	OutputOffset   int64             `json:"output_offset"`
	Pid            int               `json:"pid"`
	Integrated     bool              `json:"integrated"`
	// Integration is IntegrationOK, IntegrationLost or IntegrationNone.
	Integration  Integration `json:"integration"`
	WaitingInput bool        `json:"waiting_input"`
	Echo         bool        `json:"echo"`
	Blocks       int         `json:"blocks"`
	// Sandbox is the profile the program runs under; nil for none.
	Sandbox *api.SandboxProfile `json:"sandbox,omitempty"`
}

// Info returns a snapshot of the session.
func (s *Session) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.infoLocked()
}

func (s *Session) infoLocked() Info {
	in := Info{
		ID: s.cfg.ID, Title: s.title, Description: s.description, Labels: copyLabels(s.labels),
		Shell: s.shell, Argv: s.redactArgvLocked(s.argv), Cwd: s.cwd, Cols: s.cols, Rows: s.rows,
		State: s.state, CreatedAt: s.createdAt, OutputOffset: s.ring.End(), Pid: s.pid,
		Integrated: s.integrated, WaitingInput: s.waiting && !s.exited, Echo: s.echo, Blocks: len(s.blocks),
		Integration: IntegrationNone, Sandbox: s.sandbox,
	}
	if s.integrated {
		in.Integration = IntegrationOK
		if s.lost {
			in.Integration = IntegrationLost
		}
	}
	if b := s.runningBlockLocked(); b != nil {
		in.CurrentCommand = b.Command
	}
	if s.lastExit != nil {
		v := *s.lastExit
		in.LastExitCode = &v
	}
	if s.exitCode != nil {
		v := *s.exitCode
		in.ExitCode = &v
	}
	return in
}

// runningBlockLocked is the innermost running block, if any.
func (s *Session) runningBlockLocked() *Block {
	switch {
	case s.fallback != nil:
		return s.fallback.block
	case s.cur != nil:
		return s.cur
	case s.pending != nil:
		return s.pending
	}
	return nil
}

// RunOptions tune Run and WaitBlock.
type RunOptions struct {
	// Timeout bounds the wait for the block to finish; when it passes first, the
	// running block is returned (not an error) so the caller can wait again. Zero:
	// wait until ctx is done.
	Timeout time.Duration
	// MaxOutputBytes is the text budget (head + tail); 0 means api.DefaultMaxOutputBytes,
	// negative means unlimited.
	MaxOutputBytes int
	// TypeAnyway types the command into a full-screen program too (Run refuses
	// otherwise: a *FullScreenError).
	TypeAnyway bool
}

// Result is a block with its rendered text and the session as it is now.
type Result struct {
	Block        Block  `json:"block"`
	Text         string `json:"text"`
	OmittedBytes int64  `json:"omitted_bytes"`
	// LostBytes counts output of the block that had already left the scrollback ring
	// when the text was rendered (a flood overwrote it).
	LostBytes int64 `json:"lost_bytes,omitempty"`
	Session   Info  `json:"session"`
}

// Run submits command and waits for its block to finish.
//
// At an idle shell prompt (shell integration) the command is typed as one bracketed
// paste, so multi-line commands and heredocs are one block, and the block ends with the
// shell's own exit code. When the foreground program is instead waiting for input (a
// nested shell, ssh, a REPL, `read`), the command and Enter are typed into it, and the
// block ends when that program waits for input again and its output has settled; its
// exit code is then absent; but a program on the alternate screen (vim, top, less)
// reads keys, not lines, and Run fails with a *FullScreenError (an ErrBusy) naming
// it, unless opts.TypeAnyway. Otherwise Run fails with ErrBusy and types nothing.
//
// While the shell is still starting, Run waits for its first prompt (within the
// timeout). When the timeout passes before the block finishes, Run returns the
// running block; WaitBlock continues the wait.
func (s *Session) Run(ctx context.Context, command string, opts RunOptions) (Result, error) {
	command = strings.TrimRight(strings.ReplaceAll(command, "\r\n", "\n"), " \t\r\n")
	if strings.TrimSpace(command) == "" {
		return Result{}, ErrEmptyCommand
	}
	if len(command) > api.MaxCommandBytes {
		return Result{}, fmt.Errorf("%w: command of %d bytes (limit %d)", ErrTooLarge, len(command), api.MaxCommandBytes)
	}
	// Waiting for the shell's prompt is bounded apart from the block's timeout, so a
	// short timeout on a session that is still starting does not fail the command.
	rctx, rcancel := withTimeout(ctx, max(opts.Timeout, readyTimeout))
	defer rcancel()

	// Awaited from before the submission, so the followers do not wake for the
	// block's start either (see Followed).
	s.awaited.Add(1)
	defer s.awaited.Add(-1)
	if !opts.TypeAnyway {
		if err := s.checkFullScreen(); err != nil {
			return Result{}, err
		}
	}
	s.runMu.Lock()
	b, payload, err := s.reserve(rctx, command)
	if err != nil {
		s.runMu.Unlock()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return Result{}, fmt.Errorf("%w: no prompt within the timeout", ErrNotStarted)
		}
		return Result{}, err
	}
	err = s.write(payload)
	s.runMu.Unlock()
	if err != nil {
		s.mu.Lock()
		s.abandonLocked(b)
		s.mu.Unlock()
		return Result{}, err
	}
	wctx, cancel := withTimeout(ctx, opts.Timeout)
	defer cancel()
	return s.waitBlock(ctx, wctx, b.N, opts)
}

// inputSettle bounds how long Run waits, after input reached a running program,
// for the samples to say whether it reads again or quit.
const inputSettle = time.Second

// readyTimeout bounds how long Run waits for a prompt (at least).
const readyTimeout = 10 * time.Second

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// reserve waits (while starting) until the session can take the command, creates its
// block and returns the bytes to type.
func (s *Session) reserve(ctx context.Context, command string) (*Block, []byte, error) {
	pasteWait := time.Time{}
	for {
		s.mu.Lock()
		if err := s.usableLocked(); err != nil {
			s.mu.Unlock()
			return nil, nil, err
		}
		ch := s.noted
		switch {
		case s.state == StateIdle:
			// zsh turns bracketed paste on just after its prompt: give it a moment
			// (a command that must be pasted would otherwise run line by line, or
			// its Tab complete).
			if !s.paste && needsPaste(command) {
				if pasteWait.IsZero() {
					pasteWait = time.Now().Add(300 * time.Millisecond)
				}
				if time.Now().Before(pasteWait) {
					s.mu.Unlock()
					if err := waitChange(ctx, ch, time.Until(pasteWait)); err != nil {
						return nil, nil, err
					}
					continue
				}
			}
			b := s.newBlockLocked(command, s.ring.End())
			b.echoFrom = b.Start
			s.pending = b
			s.forgetWaitingLocked()
			// Always pasted when the shell takes pastes, even one plain line: typed
			// key by key, the user's key bindings would act on it (a vi-mode "jj"
			// escape, auto-closing brackets) and another command would run.
			paste := s.paste
			s.emitLocked(Event{Kind: EventBlockStarted, Block: b})
			s.updateStateLocked()
			s.broadcastLocked()
			s.kickPollerLocked(true)
			s.mu.Unlock()
			return b, typed(command, paste), nil
		case s.waiting && s.fallback == nil && s.pending == nil && (!s.integrated || s.cur != nil):
			// In a shell with integration, only a program running inside a block
			// (nested shell, ssh, REPL, read) takes typed commands; at the shell's
			// own prompt the marks are the truth.
			b := s.newBlockLocked(command, s.ring.End())
			b.Fallback, b.echoFrom, b.prompt = true, b.Start, true
			s.fallback = &fallbackRun{block: b, submitted: time.Now()}
			paste := s.paste && strings.Contains(command, "\n")
			s.emitLocked(Event{Kind: EventBlockStarted, Block: b})
			s.updateStateLocked()
			s.broadcastLocked()
			s.kickPollerLocked(true)
			s.mu.Unlock()
			return b, typed(command, paste), nil
		case s.inputStale && (s.cur != nil || s.fallback != nil) && time.Since(s.inputAt) < inputSettle:
			// Input reached the running program: it may quit (the shell reads
			// next, its D mark on the way) or read again; the samples say which.
			left := inputSettle - time.Since(s.inputAt)
			s.mu.Unlock()
			if err := waitChange(ctx, ch, left); err != nil {
				return nil, nil, err
			}
			continue
		case s.state == StateStarting, s.integrated && !s.seenPrompt,
			// The shell was answered by the guard and acts on it in a moment.
			s.guardAwait && s.guarding == 0,
			// Between a command's end (D) and the next prompt (A): the shell is
			// running its prompt hooks and will be idle in a moment.
			s.integrated && s.cur == nil && s.pending == nil && s.fallback == nil && !s.atPrompt:
			s.mu.Unlock()
			if err := waitChange(ctx, ch, 0); err != nil {
				return nil, nil, err
			}
			continue
		}
		cur := ""
		if b := s.runningBlockLocked(); b != nil {
			cur = fmt.Sprintf(" (block %d %q is running)", b.N, b.Command)
		}
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: a command is running and not waiting for input%s", ErrBusy, cur)
	}
}

// typed returns the bytes that type command followed by Enter.
func typed(command string, paste bool) []byte {
	if paste {
		return []byte("\x1b[200~" + command + "\x1b[201~\r")
	}
	return []byte(strings.ReplaceAll(command, "\n", "\r") + "\r")
}

// needsPaste reports whether command has more than one line or a control character
// (a Tab would complete, a ^R search): typed outside a paste, it would not be what
// runs.
func needsPaste(command string) bool {
	return strings.ContainsFunc(command, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// abandonLocked drops the reservation of a block whose command could not be typed.
func (s *Session) abandonLocked(b *Block) {
	if s.pending == b {
		s.pending = nil
	}
	if s.fallback != nil && s.fallback.block == b {
		s.fallback = nil
	}
	s.finishBlockLocked(b, s.ring.End(), nil, NoteNotTyped)
	s.updateStateLocked()
	s.broadcastLocked()
}

// waitChange waits for ch, ctx or (when d > 0) d.
func waitChange(ctx context.Context, ch <-chan struct{}, d time.Duration) error {
	var tc <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-ch:
	case <-tc:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// WaitBlock waits for block n to finish (within opts.Timeout) and returns it with its
// text; a block still running at the timeout is returned as it is.
func (s *Session) WaitBlock(ctx context.Context, n int, opts RunOptions) (Result, error) {
	wctx, cancel := withTimeout(ctx, opts.Timeout)
	defer cancel()
	return s.waitBlock(ctx, wctx, n, opts)
}

func (s *Session) waitBlock(ctx, wctx context.Context, n int, opts RunOptions) (Result, error) {
	s.awaited.Add(1)
	defer s.awaited.Add(-1)
	for {
		s.mu.Lock()
		if n < 1 || n > len(s.blocks) {
			s.mu.Unlock()
			return Result{}, fmt.Errorf("%w: %d", ErrNoBlock, n)
		}
		done := s.blocks[n-1].State == BlockDone
		ch := s.noted
		s.mu.Unlock()
		if done {
			s.awaitPrompt(wctx, promptAfterBlock)
			break
		}
		if err := waitChange(wctx, ch, 0); err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			break // timeout: return the running block
		}
	}
	return s.BlockText(n, TextOptions{MaxBytes: opts.MaxOutputBytes})
}

// Awaited reports whether a Run or WaitBlock caller is waiting for a block to
// finish. Followers of the output that can wait (viewers with a Linger, the node's
// publishers) hold back while it is so, so the caller is answered first.
func (s *Session) Awaited() bool { return s.awaited.Load() > 0 }

// promptAfterBlock bounds how long a finished Run waits for the shell's next prompt,
// so the session state it returns is idle rather than "between command and prompt".
const promptAfterBlock = 250 * time.Millisecond

// awaitPrompt waits (at most d) while an integrated shell is between a command's end
// and its next prompt.
func (s *Session) awaitPrompt(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		s.mu.Lock()
		between := s.integrated && !s.exited && !s.closed && !s.atPrompt &&
			s.cur == nil && s.pending == nil && s.fallback == nil
		ch := s.noted
		s.mu.Unlock()
		if !between {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// TextOptions select what BlockText returns.
type TextOptions struct {
	// MaxBytes is the text budget; 0 means api.DefaultMaxOutputBytes, negative unlimited.
	MaxBytes int
	// Offset skips that many lines (after Grep); Limit keeps at most that many (0: all).
	Offset, Limit int
	// Grep keeps only lines matching this regular expression, each prefixed with its
	// line number ("12: ...").
	Grep string
}

// BlockText renders block n: ANSI stripped, `\r` overwrites and cursor moves resolved,
// marks removed, typed echo and the trailing prompt of fallback blocks removed, then cut
// to the byte budget as head + tail with the omitted byte count. Rendering happens
// outside the session lock, one bounded piece of the range at a time.
func (s *Session) BlockText(n int, opts TextOptions) (Result, error) {
	var re *regexp.Regexp
	if opts.Grep != "" {
		var err error
		if re, err = regexp.Compile(opts.Grep); err != nil {
			return Result{}, fmt.Errorf("%w: grep: %v", ErrBadConfig, err)
		}
	}
	if opts.Offset < 0 || opts.Limit < 0 {
		return Result{}, fmt.Errorf("%w: negative offset or limit", ErrBadConfig)
	}
	max := opts.MaxBytes
	if max == 0 {
		max = api.DefaultMaxOutputBytes
	}
	s.mu.Lock()
	if n < 1 || n > len(s.blocks) {
		s.mu.Unlock()
		return Result{}, fmt.Errorf("%w: %d", ErrNoBlock, n)
	}
	blk := s.snapshotLocked(s.blocks[n-1])
	rows := s.rows
	s.mu.Unlock()

	budget := newTextBudget(max)
	var sink lineSink = budget
	if re != nil || opts.Offset > 0 || opts.Limit > 0 {
		sink = &filterSink{next: sink, re: re, offset: opts.Offset, limit: opts.Limit}
	}
	trim := &trimSink{next: sink, holdLast: blk.prompt && blk.State == BlockDone}
	if blk.echoFrom != 0 || blk.Fallback {
		trim.echo = strings.Split(blk.Command, "\n")
	}
	r := newTextRenderer(rows, trim)
	lost, last, err := s.renderRange(r, blk.Start, blk.End)
	if err != nil {
		return Result{}, err
	}
	r.Close()
	// Output that does not end in a newline ends with the program's prompt.
	trim.close(last != '\n')
	text, omitted := budget.result()
	if lost > 0 {
		text = fmt.Sprintf("[... %d bytes of this block are no longer in scrollback (read them from the recording) ...]\n", lost) + text
	}
	return Result{Block: blk, Text: text, OmittedBytes: omitted, LostBytes: lost, Session: s.Info()}, nil
}

// renderRange feeds [from, to) of the output to w in bounded pieces, copying each
// piece under the lock and rendering it outside. It returns how many bytes at the start
// were no longer held, and the last byte rendered.
func (s *Session) renderRange(r *textRenderer, from, to int64) (lost int64, last byte, err error) {
	const piece = 256 << 10
	buf := make([]byte, 0, min(piece, max(0, to-from)))
	for pos := from; pos < to; {
		s.mu.Lock()
		if start := s.ring.Start(); pos < start {
			// Not held (any more): a flood overwrote it, possibly while we rendered.
			lost += min(start, to) - pos
			pos = min(start, to)
		}
		a, b := s.ring.Slices(pos, min(to, pos+piece))
		buf = append(append(buf[:0], a...), b...)
		s.mu.Unlock()
		if len(buf) == 0 {
			break
		}
		r.Write(buf)
		pos += int64(len(buf))
		last = buf[len(buf)-1]
	}
	return lost, last, nil
}

// trimSink drops the typed echo of a command at the start of a block and, for commands
// typed into a program (fallback), holds the last line back: when the output ends
// without a newline, that line is the program's prompt and is dropped.
type trimSink struct {
	next     lineSink
	echo     []string // remaining command lines to match against leading lines
	holdLast bool
	held     []byte
	has      bool
}

func (t *trimSink) line(l []byte) {
	if len(t.echo) > 0 {
		want := strings.TrimSpace(t.echo[0])
		if want == "" || strings.HasSuffix(strings.TrimSpace(string(l)), want) {
			t.echo = t.echo[1:]
			return
		}
		t.echo = nil
	}
	if !t.holdLast {
		t.next.line(l)
		return
	}
	if t.has {
		t.next.line(t.held)
	}
	t.held, t.has = append(t.held[:0], l...), true
}

// close flushes the held line unless it is a prompt.
func (t *trimSink) close(endsInPrompt bool) {
	if t.has && !endsInPrompt {
		t.next.line(t.held)
	}
	t.has = false
}

// filterSink applies grep, offset and limit to lines.
type filterSink struct {
	next          lineSink
	re            *regexp.Regexp
	offset, limit int
	n, kept       int
	buf           []byte
}

func (f *filterSink) line(l []byte) {
	f.n++
	if f.re != nil {
		if !f.re.Match(l) {
			return
		}
		f.buf = append(fmt.Appendf(f.buf[:0], "%d: ", f.n), l...)
		l = f.buf
	}
	if f.offset > 0 {
		f.offset--
		return
	}
	if f.limit > 0 && f.kept >= f.limit {
		return
	}
	f.kept++
	f.next.line(l)
}
