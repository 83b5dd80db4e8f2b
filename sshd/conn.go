package sshd

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"golang.org/x/crypto/ssh"
)

// Verbs an SSH user may run, and the least role each needs. Anything else (the
// server verbs, try, replay: they would act on the controller's own host) is refused.
var sshVerbs = map[string]string{
	"help": api.RoleViewer, "nodes": api.RoleViewer, "ls": api.RoleViewer, "screen": api.RoleViewer, "blocks": api.RoleViewer,
	"block": api.RoleViewer, "logs": api.RoleViewer, "wait": api.RoleViewer, "attach": api.RoleViewer,
	"new": api.RoleOperator, "run": api.RoleOperator, "send": api.RoleOperator, "keys": api.RoleOperator,
	"take-over": api.RoleOperator,
	"kill":      api.RoleOperator, // the node lets an operator close only the sessions it created
	// approvals; approve and deny: the node checks the decider (admin, or a role the
	// rule names as approver)
	"approvals": api.RoleViewer, "approve": api.RoleOperator, "deny": api.RoleOperator,
}

// maxSSHChannels bounds the session channels open at once on one connection
// (OpenSSH's MaxSessions is 10 too).
const maxSSHChannels = 10

// detachKey ends an attach and leaves the session running (Ctrl-]).
const detachKey = 0x1d

func (s *Server) serveConn(nc net.Conn) {
	nc.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	conn, chans, reqs, err := ssh.NewServerConn(nc, s.conf)
	if err != nil {
		s.log.Debug("ssh handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		return
	}
	nc.SetDeadline(time.Time{})
	defer conn.Close()
	id := identity{fingerprint: conn.Permissions.Extensions["fp"], role: conn.Permissions.Extensions["role"], principal: conn.Permissions.Extensions["principal"]}
	if why := s.loggedIn(nc, id); why != "" {
		s.log.Warn("ssh connection refused", "remote", nc.RemoteAddr().String(), "why", why)
		s.fleet.Audit(api.AuditRecord{Actor: id.actor(), Action: "ssh login", Detail: "from " + conn.RemoteAddr().String(), Result: "refused", Error: why})
		return
	}
	s.fleet.Audit(api.AuditRecord{Actor: id.actor(), Action: "ssh login", Detail: fmt.Sprintf("user %s role %s from %s", untrusted(conn.User()), id.role, conn.RemoteAddr()), Result: "ok"})
	ctx, cancel := context.WithCancel(s.fleet.ActAs(id.actor(), id.role))
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { // global requests (port forwarding, keepalives): refused
		defer wg.Done()
		ssh.DiscardRequests(reqs)
	}()
	var open atomic.Int32 // session channels open on this connection
	for nch := range chans {
		if nch.ChannelType() != "session" {
			nch.Reject(ssh.UnknownChannelType, "fleetmux serves session channels only (no forwarding)")
			continue
		}
		if open.Load() >= maxSSHChannels {
			nch.Reject(ssh.ResourceShortage, fmt.Sprintf("at most %d sessions at once on one connection", maxSSHChannels))
			continue
		}
		ch, chReqs, err := nch.Accept()
		if err != nil {
			continue
		}
		open.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer open.Add(-1)
			defer ch.Close()
			sc := &sshSession{s: s, id: id, user: conn.User(), ch: ch}
			sc.serve(ctx, chReqs)
		}()
	}
	s.fleet.Audit(api.AuditRecord{Actor: id.actor(), Action: "ssh logout", Detail: conn.RemoteAddr().String(), Result: "ok"})
}

// sshSession is one session channel: a shell, an exec or an attach.
type sshSession struct {
	s    *Server
	id   identity
	user string
	ch   ssh.Channel

	mu      sync.Mutex // guards pty, cols, rows, resize
	pty     bool
	cols    int
	rows    int
	resize  func(cols, rows int) // set while attached
	started bool

	inOnce sync.Once
	in     chan []byte    // what the client types, read by one pump (see input)
	bg     sync.WaitGroup // the input pump and attach's output goroutine
}

// input returns what the client types: one goroutine reads the channel for the
// whole session (a menu and the attaches it starts take turns reading from it);
// the channel closes when the client's input ends.
func (sc *sshSession) input() <-chan []byte {
	sc.inOnce.Do(func() {
		sc.in = make(chan []byte)
		sc.bg.Add(1)
		go func() {
			defer sc.bg.Done()
			defer close(sc.in)
			buf := make([]byte, 32<<10)
			for {
				n, err := sc.ch.Read(buf)
				if n > 0 {
					sc.in <- bytes.Clone(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
	})
	return sc.in
}

func (sc *sshSession) serve(ctx context.Context, reqs <-chan *ssh.Request) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var work sync.WaitGroup
	defer sc.bg.Wait() // after the channel is closed: the input pump's Read has ended
	defer work.Wait()
	for req := range reqs {
		switch req.Type {
		case "pty-req":
			cols, rows, ok := parsePtyReq(req.Payload)
			sc.mu.Lock()
			sc.pty, sc.cols, sc.rows = ok, cols, rows
			sc.mu.Unlock()
			req.Reply(ok, nil)
		case "window-change":
			if len(req.Payload) >= 8 {
				cols, rows := int(binary.BigEndian.Uint32(req.Payload)), int(binary.BigEndian.Uint32(req.Payload[4:]))
				sc.mu.Lock()
				sc.cols, sc.rows = cols, rows
				fn := sc.resize
				sc.mu.Unlock()
				if fn != nil {
					fn(cols, rows)
				}
			}
			if req.WantReply {
				req.Reply(true, nil)
			}
		case "shell", "exec":
			var args []string
			if req.Type == "exec" {
				var p struct{ Command string }
				if err := ssh.Unmarshal(req.Payload, &p); err != nil {
					req.Reply(false, nil)
					continue
				}
				var err error
				if args, err = splitArgs(p.Command); err != nil {
					req.Reply(true, nil)
					sc.finish(2, "fleetmux: "+err.Error()+"\n")
					return
				}
			}
			sc.mu.Lock()
			started := sc.started
			sc.started = true
			sc.mu.Unlock()
			if started {
				req.Reply(false, nil)
				continue
			}
			req.Reply(true, nil)
			work.Add(1)
			go func() {
				defer work.Done()
				code := sc.run(ctx, args)
				sc.exit(code)
				cancel()
			}()
		default: // env, subsystem, x11-req, auth-agent-req, …
			if req.WantReply {
				req.Reply(false, nil)
			}
		}
	}
}

// finish prints msg on stderr and ends the channel with code.
func (sc *sshSession) finish(code int, msg string) {
	io.WriteString(sc.ch.Stderr(), msg)
	sc.exit(code)
}

func (sc *sshSession) exit(code int) {
	sc.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
	sc.ch.CloseWrite()
	sc.ch.Close()
}

// out is the channel's stdout, with \n → \r\n when the client has a PTY (its
// terminal is raw).
func (sc *sshSession) out() io.Writer {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.pty {
		return crlfWriter{sc.ch}
	}
	return sc.ch
}

func (sc *sshSession) errOut() io.Writer {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.pty {
		return crlfWriter{sc.ch.Stderr()}
	}
	return sc.ch.Stderr()
}

// run runs a shell (args nil) or a command and returns the exit status.
func (sc *sshSession) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		if node, id, ok := strings.Cut(sc.user, "+"); ok {
			return sc.attach(ctx, node, id)
		}
		sc.mu.Lock()
		pty := sc.pty
		sc.mu.Unlock()
		if !pty {
			fmt.Fprint(sc.ch.Stderr(), "fleetmux: no command: try `ssh HOST -p PORT help`, or `ssh -t` for the session menu\n")
			return 2
		}
		return sc.menu(ctx)
	}
	verb := args[0]
	need, ok := sshVerbs[verb]
	switch {
	case !ok:
		fmt.Fprintf(sc.errOut(), "fleetmux: %q is not a command here (commands: %s)\n", verb, strings.Join(sortedVerbs(), ", "))
		sc.audit(verb, strings.Join(args, " "), "refused", "unknown command")
		return 2
	case !api.RoleAtLeast(sc.id.role, need):
		fmt.Fprintf(sc.errOut(), "fleetmux: %s needs the %s role; your key has %s\n", verb, need, sc.id.role)
		sc.audit(verb, strings.Join(args, " "), "refused", "role "+sc.id.role)
		return refusal(verb, 1)
	}
	for _, a := range args[1:] {
		if a == "--" {
			break
		}
		if name, _, _ := strings.Cut(a, "="); name == "--addr" || name == "--token" || name == "--actor" {
			fmt.Fprintf(sc.errOut(), "fleetmux: %s is not allowed over SSH\n", a)
			return refusal(verb, 2)
		}
	}
	if verb == "attach" {
		if len(args) != 2 {
			fmt.Fprint(sc.errOut(), "fleetmux: attach NODE/ID\n")
			return 2
		}
		node, id, err := api.ParseAddress(args[1])
		if err != nil {
			fmt.Fprintf(sc.errOut(), "fleetmux: %v\n", err)
			return 2
		}
		return sc.attach(ctx, node, id)
	}
	code := sc.s.cfg.Exec(ctx, args, sc.id.role, sc.id.actor(), sc.ch, sc.out(), sc.errOut())
	result := "ok"
	if code != 0 {
		result = fmt.Sprintf("exit %d", code)
	}
	sc.audit(verb, strings.Join(args, " "), result, "")
	return code
}

// refusal is the exit status of a request the front door refuses: for run, 255, as
// with ssh and `fleetmux run` (its other statuses are the command's own); else code.
func refusal(verb string, code int) int {
	if verb == "run" {
		return 255
	}
	return code
}

func (sc *sshSession) audit(action, detail, result, errMsg string) {
	if len(detail) > 512 {
		detail = detail[:512] + "…"
	}
	sc.s.fleet.Audit(api.AuditRecord{Actor: sc.id.actor(), Principal: sc.id.actor(), Action: "ssh " + action, Detail: detail, Result: result, Error: errMsg})
}

func sortedVerbs() []string {
	var v []string
	for k := range sshVerbs {
		v = append(v, k)
	}
	slices.Sort(v)
	return v
}

// crlfWriter turns \n into \r\n for a raw terminal.
type crlfWriter struct{ w io.Writer }

func (c crlfWriter) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// parsePtyReq reads the terminal size of a pty-req (RFC 4254 6.2).
func parsePtyReq(p []byte) (cols, rows int, ok bool) {
	var req struct {
		Term                 string
		Cols, Rows, PxW, PxH uint32
		Modes                string
	}
	if err := ssh.Unmarshal(p, &req); err != nil {
		return 0, 0, false
	}
	return int(req.Cols), int(req.Rows), true
}

// splitArgs splits a command line like a shell does for words and quotes
// ('single', "double" with \ escapes, \ outside quotes); nothing is expanded.
func splitArgs(s string) ([]string, error) {
	var (
		args  []string
		cur   strings.Builder
		inArg bool
		quote rune
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\$`+"`", rs[i+1]):
				i++
				cur.WriteRune(rs[i])
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inArg = r, true
		case r == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
			inArg = true
		case r == ' ' || r == '\t' || r == '\n':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}

// Verb reports whether verb may run over SSH at all (for some role). The CLI
// builds the front door's command tree from it: a verb that reads the
// controller's own environment or files must never be one.
func Verb(verb string) bool {
	_, ok := sshVerbs[verb]
	return ok
}
