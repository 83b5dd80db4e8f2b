package guard

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// sudo without handing out the password (DESIGN.md "Guardrails"): when a session's
// foreground program waits for input with echo off, the guard looks at who asks
// and at what, and has the node type a stored secret (secret.go) if the policy in
// force lets the session's writer (the lease holder) use it there
// (policy.Policy.SecretFor):
//
//   - the program reading the terminal runs set-user-ID (its real and effective
//     uids differ: sudo, su, passwd run so), so a prompt a user's own program
//     prints (`read -s -p 'password: '`) is never answered; its executable's base
//     name must be one of the entry's programs;
//   - the last line of output matches the entry's prompt;
//   - at most once per block: a wrong secret is not typed again (the program's
//     next prompt waits for a person);
//   - right before the write, the program is the only process that can read the
//     terminal: alone in the foreground process group, and no process outside the
//     session holds the terminal open (Prompt.SoleReader). Otherwise the secret is
//     refused (audit "secret refused: other readers") and the prompt waits for a
//     person. The window left: a process of the session joining the foreground
//     group between that check and the write.
//
// The secret and Enter go to the PTY as input: with echo off they never reach the
// output, and they go nowhere else (no reply, stream, recording, screen or audit
// record holds them; the audit record says which secret was typed, for whom).

// Prompt is a session waiting at a password prompt, as the guard needs it (the
// node's entry implements it).
type Prompt interface {
	// PasswordPrompt reports whether the session's foreground program waits for
	// input with echo off, and the number of the block it belongs to (the blocks
	// so far + 1: a prompt before the first block counts too).
	PasswordPrompt() (block int, ok bool)
	// Reader is the process reading the terminal.
	Reader() (pid int, ok bool)
	// SoleReader reports whether pid is the only process that can read the
	// terminal.
	SoleReader(pid int) bool
	// PromptLine is the last line of the output without control sequences.
	PromptLine() string
	// Input writes to the terminal.
	Input(b []byte) error
}

// sudoState is a session's prompt-answering state.
type sudoState struct {
	mu       sync.Mutex // guards answered and serialises AnswerPrompt
	answered int        // the block when a secret was last typed (0: never)
}

// AnswerPrompt types the secret the policy names at the prompt p waits at, if any
// (see above). The node calls it when the session starts waiting for input; it
// does not block on the program.
func (s *Session) AnswerPrompt(p Prompt) {
	g := s.g
	pol := g.Policy()
	if pol == nil || len(pol.Secrets) == 0 {
		return
	}
	block, ok := p.PasswordPrompt()
	if !ok {
		return
	}
	s.sudo.mu.Lock()
	defer s.sudo.mu.Unlock()
	if s.sudo.answered == block {
		return // typed once in this block already: a wrong secret is not retried
	}
	pid, ok := p.Reader()
	if !ok {
		return
	}
	prog, ok := setuidProgram(pid)
	if !ok {
		return
	}
	w := s.LastWriter()
	sec, ok := pol.SecretFor(policy.SecretRequest{Node: g.cfg.Node, Principal: w.Principal, Role: w.Role, Program: prog, Prompt: p.PromptLine()})
	if !ok {
		return
	}
	s.sudo.answered = block
	id := s.t.ID()
	rec := api.AuditRecord{Time: time.Now().UTC(), Node: g.cfg.Node, Session: id, Actor: w.Actor, Principal: w.Principal, Role: w.Role,
		Action: AuditSecret, Detail: Truncate("secret "+sec.Name+" typed at the password prompt of "+prog+" for "+w.Principal, 512),
		Result: "ok", PolicyVersion: pol.Version}
	value, err := g.readSecret(sec.Name)
	refused := false
	if err == nil {
		line := make([]byte, len(value)+1)
		copy(line, value)
		line[len(value)] = '\r'
		// Last, right before the write: the program must be the only process that
		// can read the terminal, or a process racing it for the terminal (one a
		// subshell left in the foreground process group, say) could read the
		// secret instead.
		if refused = !p.SoleReader(pid); !refused {
			err = p.Input(line)
		}
		clear(line)
	}
	clear(value)
	if refused {
		g.log.Warn("secret refused: other processes can read the terminal", "session", id, "secret", sec.Name, "program", prog, "principal", w.Principal)
		rec.Detail = Truncate("secret "+sec.Name+" refused at the password prompt of "+prog+" for "+w.Principal+": other readers", 512)
		rec.Result, rec.Error = api.CodeDenied, "secret refused: other readers (another process can read the terminal; the prompt waits for a person)"
	} else if err != nil {
		g.log.Warn("secret not typed", "session", id, "secret", sec.Name, "err", err)
		rec.Result, rec.Error = api.CodeInternal, "secret "+sec.Name+" not typed (details in the node's log)"
		if os.IsNotExist(err) {
			rec.Result, rec.Error = api.CodeNotFound, "secret "+sec.Name+" is not stored on this node (fleetmux secret set)"
		}
	} else {
		g.log.Info("secret typed at a password prompt", "session", id, "secret", sec.Name, "program", prog, "principal", w.Principal)
	}
	g.cfg.Audit.Audit(rec)
}

// setuidProgram returns the base name of pid's executable when pid runs
// set-user-ID (its real and effective uids differ), and false otherwise.
func setuidProgram(pid int) (string, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return "", false
	}
	var uids []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			uids = strings.Fields(rest)
			break
		}
	}
	if len(uids) < 2 || uids[0] == uids[1] {
		return "", false
	}
	exe, err := os.Readlink(dir + "/exe")
	if err != nil {
		return "", false
	}
	return filepath.Base(exe), true
}
