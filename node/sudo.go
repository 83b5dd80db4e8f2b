package node

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
	"github.com/fleetmux/fleetmux/session"
)

// sudo without handing out the password (DESIGN.md "Guardrails"): when a session's
// foreground program waits for input with echo off, the node looks at who asks and
// at what, and types a stored secret (secret.go) if the policy in force lets the
// session's writer (the lease holder) use it there (policy.Policy.SecretFor):
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
//     session holds the terminal open (session.SoleReader). Otherwise the secret is
//     refused (audit "secret refused: other readers") and the prompt waits for a
//     person. The window left: a process of the session joining the foreground
//     group between that check and the write.
//
// The secret and Enter go to the PTY as input: with echo off they never reach the
// output, and they go nowhere else (no reply, stream, recording, screen or audit
// record holds them; the audit record says which secret was typed, for whom).

// auditSecret is the audit action of a secret the node typed (or could not type).
const auditSecret = "secret"

// promptTail is how much of the output's end answerPrompt reads for the prompt line.
const promptTail = 512

// entrySudo is an entry's prompt-answering state.
type entrySudo struct {
	mu       sync.Mutex // guards answered and serialises answerPrompt
	answered int        // the block count when a secret was last typed (0: never)
}

// answerPrompt types the secret the policy names at the prompt e's session waits
// at, if any (see above). It runs on the entry's event pump when the session starts
// waiting for input; it does not block on the program.
func (e *entry) answerPrompt() {
	n := e.n
	p := n.policy()
	if p == nil || len(p.Secrets) == 0 {
		return
	}
	in := e.s.Info()
	if !in.WaitingInput || in.Echo || in.State == session.StateExited {
		return
	}
	e.sudo.mu.Lock()
	defer e.sudo.mu.Unlock()
	block := in.Blocks + 1 // +1: a prompt before the first block counts too
	if e.sudo.answered == block {
		return // typed once in this block already: a wrong secret is not retried
	}
	pid, ok := e.s.Reader()
	if !ok {
		return
	}
	prog, ok := setuidProgram(pid)
	if !ok {
		return
	}
	w := e.lastWriter()
	s, ok := p.SecretFor(policy.SecretRequest{Node: n.cfg.Name, Principal: w.Principal, Role: w.Role, Program: prog, Prompt: e.promptLine()})
	if !ok {
		return
	}
	e.sudo.answered = block
	rec := api.AuditRecord{Time: time.Now().UTC(), Node: n.cfg.Name, Session: e.id, Actor: w.Actor, Principal: w.Principal, Role: w.Role,
		Action: auditSecret, Detail: truncate("secret "+s.Name+" typed at the password prompt of "+prog+" for "+w.Principal, 512),
		Result: "ok", PolicyVersion: p.Version}
	value, err := n.readSecret(s.Name)
	refused := false
	if err == nil {
		line := make([]byte, len(value)+1)
		copy(line, value)
		line[len(value)] = '\r'
		// Last, right before the write: the program must be the only process that
		// can read the terminal (session.SoleReader), or a process racing it for the
		// terminal (one a subshell left in the foreground process group, say) could
		// read the secret instead.
		if refused = !e.s.SoleReader(pid); !refused {
			err = e.s.Input(line)
		}
		clear(line)
	}
	clear(value)
	if refused {
		n.log.Warn("secret refused: other processes can read the terminal", "session", e.id, "secret", s.Name, "program", prog, "principal", w.Principal)
		rec.Detail = truncate("secret "+s.Name+" refused at the password prompt of "+prog+" for "+w.Principal+": other readers", 512)
		rec.Result, rec.Error = api.CodeDenied, "secret refused: other readers (another process can read the terminal; the prompt waits for a person)"
	} else if err != nil {
		n.log.Warn("secret not typed", "session", e.id, "secret", s.Name, "err", err)
		rec.Result, rec.Error = api.CodeInternal, "secret "+s.Name+" not typed (details in the node's log)"
		if os.IsNotExist(err) {
			rec.Result, rec.Error = api.CodeNotFound, "secret "+s.Name+" is not stored on this node (fleetmux secret set)"
		}
	} else {
		n.log.Info("secret typed at a password prompt", "session", e.id, "secret", s.Name, "program", prog, "principal", w.Principal)
	}
	n.audits.Add(func() []byte { return marshalRecord(rec) })
}

// promptLine is the last line of the session's output without control sequences:
// what a password prompt leaves on the screen.
func (e *entry) promptLine() string {
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
