package node

import (
	"context"
	"slices"
	"unicode/utf8"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
	"github.com/fleetmux/fleetmux/session"
)

// Typed text (the input and keys verbs) is checked as command lines, best effort.
//
// The node follows what was typed since the last line end (the entry's pending
// text), with a rough model of a line editor: backspace, C-u, C-w and C-c edit or
// clear it, escape sequences (arrows, function keys) are dropped. When input ends
// a line (CR or LF), the line is decided before any byte of that input is
// written; a denied line writes nothing.
//
// What the program in the foreground does with the bytes is unknown to the node:
// history recall, tab completion, a line editor's own keys or a program that
// builds commands from several lines all escape this check. It is a net for the
// obvious, not a sandbox.
//
//   - Without shell integration in the foreground (a program started as argv, a
//     REPL or a nested shell inside an integrated one, a command reading its
//     terminal), the check decides: deny refuses the input, approve holds it
//     until a person decides.
//   - At an integrated shell's prompt, the shell itself asks the node before the
//     line runs (session.Config.Guard), and decides for real, holding if needed.
//     The node then only pre-checks for a deny (which it refuses at once, naming
//     the rule); allow and approve pass to the shell, so a line is never held
//     twice.

// maxPending bounds the typed text a session's pending line keeps (the end of a
// longer line is kept).
const maxPending = 8 << 10

// guardInput decides the lines that data completes in e's session for w (see
// above). On nil the caller writes data; typedInput records it.
func (n *Node) guardInput(ctx context.Context, e *entry, w writer, data []byte) error {
	e.guard.mu.Lock()
	lines, _ := editLine(e.guard.pending, data)
	if len(lines) > 0 && len(e.guard.pending) > 0 && (e.guard.pendingMixed || e.guard.pendingBy != w) {
		// The line this input ends holds text another writer typed (unless this
		// input clears it first): it would run, and be decided, as this writer's.
		if own, _ := editLine(nil, data); !slices.Equal(own, lines) {
			by := e.guard.pendingBy
			e.guard.mu.Unlock()
			who := "another writer"
			if by != (writer{}) {
				who = by.wire(false).Name()
			}
			return api.Errorf(api.CodeBusy, "the line typed in %s so far is %s's: this input would end it as yours; clear it first (Ctrl-U, keys [\"C-u\"]), or let them finish it", e.addr(), who)
		}
	}
	e.guard.mu.Unlock()
	if len(lines) == 0 {
		return nil
	}
	in := e.s.Info()
	atPrompt := in.Integration == session.IntegrationOK && in.State == session.StateIdle
	for _, line := range lines {
		if line == "" {
			continue
		}
		if !atPrompt {
			if err := n.enforce(ctx, e, w, line); err != nil {
				return err
			}
			continue
		}
		if err := n.precheck(ctx, e, w, line); err != nil {
			return err
		}
	}
	return nil
}

// typedInput records data as typed by w into e's session (it was written): the
// pending line, and whose it is, follow it.
func (e *entry) typedInput(w writer, data []byte) {
	e.guard.mu.Lock()
	defer e.guard.mu.Unlock()
	before := len(e.guard.pending)
	lines, rest := editLine(e.guard.pending, data)
	e.guard.pending = rest
	switch {
	case len(rest) == 0:
		e.guard.pendingBy, e.guard.pendingMixed = writer{}, false
	case before == 0 || len(lines) > 0: // a line begun by this input
		e.guard.pendingBy, e.guard.pendingMixed = w, false
	case e.guard.pendingBy != w:
		e.guard.pendingMixed = true
	}
}

// precheck refuses a line that the policy denies outright; anything else is left to
// the shell's own check (the hook), which decides and holds.
func (n *Node) precheck(ctx context.Context, e *entry, w writer, line string) error {
	if err := n.policyLoaded(ctx); err != nil {
		return err
	}
	d := n.decide(e, w, line)
	if d.Action != api.ActionDeny {
		return nil
	}
	err := n.verdict(ctx, e, w, line, d)
	if slot, ok := ctx.Value(decisionKey{}).(*decision); ok {
		slot.set(d)
	}
	return err
}

// keyBytes is what named keys type (nil for a bad name: the session refuses it).
func keyBytes(names []string) []byte {
	b, err := session.KeysBytes(names)
	if err != nil {
		return nil
	}
	return b
}

// editLine applies typed bytes to a pending line: it returns the lines they end
// (CR or LF; in order) and the text pending after them. It models a line editor
// roughly: DEL and BS erase a character, C-u and C-c clear the line, C-w erases a
// word, escape sequences and other control characters are dropped. pending is
// not modified.
func editLine(pending, data []byte) (lines []string, rest []byte) {
	cur := append([]byte(nil), pending...)
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\r' || c == '\n':
			if c == '\n' && i > 0 && data[i-1] == '\r' {
				continue // CRLF ends one line
			}
			lines = append(lines, string(cur))
			cur = cur[:0]
		case c == 0x7f || c == '\b':
			if len(cur) > 0 {
				_, size := utf8.DecodeLastRune(cur)
				cur = cur[:len(cur)-size]
			}
		case c == 0x15 || c == 0x03: // C-u, C-c
			cur = cur[:0]
		case c == 0x17: // C-w: blanks, then the word before them
			for len(cur) > 0 && (cur[len(cur)-1] == ' ' || cur[len(cur)-1] == '\t') {
				cur = cur[:len(cur)-1]
			}
			for len(cur) > 0 && cur[len(cur)-1] != ' ' && cur[len(cur)-1] != '\t' {
				cur = cur[:len(cur)-1]
			}
		case c == 0x1b:
			i = skipEscape(data, i)
		case c == '\t':
			cur = append(cur, c)
		case c < 0x20:
			// other control characters do not type text
		default:
			cur = append(cur, c)
		}
	}
	if len(cur) > maxPending {
		cur = cur[len(cur)-maxPending:]
	}
	return lines, cur
}

// skipEscape returns the index of the last byte of the escape sequence that starts
// at data[i] (ESC): CSI (ESC [ … final byte), SS3 (ESC O x), or ESC and one byte.
func skipEscape(data []byte, i int) int {
	if i+1 >= len(data) {
		return i
	}
	switch data[i+1] {
	case '[':
		for j := i + 2; j < len(data); j++ {
			if data[j] >= 0x40 && data[j] <= 0x7e {
				return j
			}
		}
		return len(data) - 1
	case 'O':
		return min(i+2, len(data)-1)
	}
	return i + 1
}

// decide is the policy's decision for w typing command into e's session.
func (n *Node) decide(e *entry, w writer, command string) policy.Decision {
	p := n.policy()
	if p == nil {
		return policy.Decision{Action: api.ActionAllow}
	}
	if w == (writer{}) {
		// Nobody this agent knows of typed the line: a question the shell asks again
		// after an agent restart (the writer was the last agent's), a line typed
		// while no agent ran, input that did not come through the node. Which of the
		// policy's rules on principals, actors and roles would apply is not known:
		// fail closed (decided for no writer, an approve rule on an actor would not
		// match and the default would let it run).
		return policy.Decision{Action: api.ActionDeny, Rule: unknownWriter, Version: p.Version}
	}
	return p.Decide(policy.Request{
		Command: command, Principal: w.Principal, Actor: w.Actor, Role: w.Role,
		Node: n.cfg.Name, NodeLabels: n.cfg.Labels, SessionLabels: e.s.Info().Labels,
	})
}
