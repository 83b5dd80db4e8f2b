package node

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/session"
)

// Guardrails at the node: package guard decides, the node acts. The node's verbs
// call n.guard.Check before they touch a session; the guard reaches the node only
// through what it defines: an Auditor and a Publisher (guardLink), a Target and a
// Prompt per session (the entry, below) and a Creator (create's held sessions).

// PolicySource is where the node takes its policy from (guard.PolicySource).
type PolicySource = guard.PolicySource

// guardLink is how the guard audits and announces through the node.
type guardLink struct{ n *Node }

func (l guardLink) Audit(rec api.AuditRecord) {
	l.n.audits.Add(func() []byte { return marshalRecord(rec) })
}

func (l guardLink) PublishApproval(ev api.ApprovalEvent) {
	publishJSON(l.n.cfg.Bus, l.n.subj.Approval(l.n.cfg.Name), ev)
}

// writerOf is the writer of a verified request.
func writerOf(req request) guard.Writer {
	return guard.Writer{Principal: req.principal, Actor: req.actor, Role: req.role}
}

// shellGuard is the session.Config.Guard of a session whose entry ep will hold once
// it is registered (a line asked about before that is refused: nobody typed it).
// A line the node itself decided and typed passes without a second decision; any
// other is decided by the guard (guard.Line), held for a person when the policy
// says approve (the line waits unexecuted at the prompt).
func (n *Node) shellGuard(ep *atomic.Pointer[entry]) func(ctx context.Context, line string) session.GuardVerdict {
	return func(ctx context.Context, line string) session.GuardVerdict {
		e := ep.Load()
		if e == nil {
			return session.GuardVerdict{Message: "the session is not registered yet"}
		}
		return n.guardLine(ctx, e, line)
	}
}

// guardLine decides line for e's shell; it blocks while an approval waits (until
// ctx ends: the shell asked about a newer line, or the session closed).
func (n *Node) guardLine(ctx context.Context, e *entry, line string) session.GuardVerdict {
	err := n.guard.Check(ctx, guard.Request{Verb: guard.Line, Session: e.guard, Command: line,
		Unaccepted: session.Unaccepted(ctx)})
	if err == nil {
		return session.GuardVerdict{Allow: true}
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		n.log.Warn("guard: a line could not be decided: denied", "session", e.id, "err", err)
		return session.GuardVerdict{Message: "the node could not decide it"}
	}
	rule, msg := guard.LineVerdict(ae)
	return session.GuardVerdict{Rule: rule, Message: msg}
}

// Integrated reports whether a command Run types may go to an integrated shell's
// prompt, which asks about it before it runs: then the guard marks it expected.
// Whatever the state now (starting, at the prompt, between a command's end and the
// prompt, the guard's answer to a typed line being acted on): the prompt may come
// back before Run types; a mark that is not used lapses, and passes only that very
// line. An integration the session takes for lost counts too: that is what its
// marks say (a command's end that did not come, a hook removed), while the shell's
// guard may well still ask, and a run's own line is then refused as no writer's.
func (e *entry) Integrated() bool {
	return e.s.Info().Integration != session.IntegrationNone
}

// atPrompt reports whether an integrated shell waits at its prompt (it asks about
// a typed line itself).
func (e *entry) atPrompt() bool {
	in := e.s.Info()
	return in.Integration == session.IntegrationOK && in.State == session.StateIdle
}

// keyBytes is what named keys type (nil for a bad name: the session refuses it).
func keyBytes(names []string) []byte {
	b, err := session.KeysBytes(names)
	if err != nil {
		return nil
	}
	return b
}

// heldOf is what approving req types, for the writer w: a run's command, or an
// input's or keys request's exact input.
func heldOf(verb string, w guard.Writer, command string, data []byte, keys []string) *guard.Held {
	return &guard.Held{Writer: w, Verb: verb, Command: command, Data: data, Keys: keys}
}

// The entry is the guard's Target and Prompt.

func (e *entry) ID() string                { return e.id }
func (e *entry) Labels() map[string]string { return e.s.Info().Labels }

// BlockDone reports whether block n of the session has ended (or is unknown).
func (e *entry) BlockDone(n int) bool {
	b, err := e.s.Block(n)
	return err != nil || b.State == session.BlockDone
}

// Replay types an approved held request as its writer and waits for its block (a
// run) or writes it (input, keys: no block, the program was not at a shell
// prompt). A session busy with another command, or whose lease another writer
// holds, is waited for (up to api.MaxWait); one that closed ends it with an error.
func (e *entry) Replay(ctx context.Context, h guard.Held) (int, *int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(e.ctx, cancel) // the session closed (or the node)
	defer stop()
	if h.Verb != guard.VerbRun {
		return 0, nil, e.typeApproved(ctx, h)
	}
	opts := session.RunOptions{Timeout: api.MaxWait, MaxOutputBytes: 1}
	typeIt := func() (session.Result, error) {
		ran, err := e.guard.AwaitRun(ctx, h.Writer) // the writer lease, as for any run
		if err != nil {
			return session.Result{}, err
		}
		// Typed at an integrated shell's prompt, the shell asks about it: it was
		// decided. Marked whatever the state now: the prompt may come back between
		// this check and Run (an unused mark lapses; it passes only this line).
		if e.Integrated() {
			e.guard.ExpectLine(h.Command)
		}
		res, err := e.s.Run(ctx, h.Command, opts)
		ran(res.Block.N, res.Block.State == session.BlockDone)
		return res, err
	}
	res, err := typeIt()
	if errors.Is(err, session.ErrBusy) {
		wctx, cancel := context.WithTimeout(ctx, api.MaxWait)
		_, err = e.s.Wait(wctx, session.UntilIdle, 0)
		cancel()
		if err == nil {
			res, err = typeIt()
		}
	}
	for err == nil && res.Block.State != session.BlockDone {
		res, err = e.s.WaitBlock(ctx, res.Block.N, opts)
	}
	if err != nil {
		return res.Block.N, nil, err
	}
	return res.Block.N, res.Block.ExitCode, nil
}

// typeApproved writes an approved input or keys request as it was asked, as the
// writer who asked (waiting, up to api.MaxWait, while another writer holds the
// session's lease).
func (e *entry) typeApproved(ctx context.Context, h guard.Held) error {
	deadline := time.Now().Add(api.MaxWait)
	err := e.guard.Typed(h.Writer, false)
	for errors.Is(err, &api.Error{Code: api.CodeBusy}) && time.Now().Before(deadline) {
		t := time.NewTimer(guard.LeaseRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.New("the session closed before it could be typed")
		case <-t.C:
		}
		err = e.guard.Typed(h.Writer, false)
	}
	if err != nil {
		return err
	}
	e.guard.TypedInput(h.Writer, h.Data) // before it is written, as input's
	if h.Verb == guard.VerbInput {
		return e.s.Input(h.Data)
	}
	return e.s.SendKeys(h.Keys...)
}

// PasswordPrompt: the foreground program waits for input with echo off.
func (e *entry) PasswordPrompt() (int, bool) {
	in := e.s.Info()
	if !in.WaitingInput || in.Echo || in.State == session.StateExited {
		return 0, false
	}
	return in.Blocks + 1, true // +1: a prompt before the first block counts too
}

func (e *entry) Reader() (int, bool)     { return e.s.Reader() }
func (e *entry) SoleReader(pid int) bool { return e.s.SoleReader(pid) }
func (e *entry) Input(b []byte) error    { return e.s.Input(b) }

// promptTail is how much of the output's end PromptLine reads for the prompt line.
const promptTail = 512

// PromptLine is the last line of the session's output without control sequences:
// what a password prompt leaves on the screen.
func (e *entry) PromptLine() string {
	oldest, end := e.s.Offsets()
	data, err := e.s.Read(max(oldest, end-promptTail), promptTail)
	if err != nil {
		return ""
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[i+1:]
	}
	data = controlSeq.ReplaceAll(data, nil)
	if i := bytes.LastIndexByte(data, '\r'); i >= 0 {
		data = data[i+1:]
	}
	return string(data)
}

// controlSeq matches terminal control sequences (CSI, OSC, other ESC sequences)
// and the C0 controls but \r.
var controlSeq = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)?|\x1b[@-_]|[\x00-\x0c\x0e-\x1f\x7f]`)
