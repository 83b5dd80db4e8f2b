package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/internal/datadir"
	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/keeper"
	"github.com/fleetmux/fleetmux/proc"
)

// The exec verbs (DESIGN "Exec"): a one-shot process without a PTY (package
// proc), decided by the guard before it starts (guard.CheckExec: argv as the
// command line it is; approve is refused, approvals are for sessions), audited as
// every mutating verb is, its output redacted under the node's redaction when it
// leaves the node. The node keeps its execs, running and ended, to be found by
// exec_id: an ended one for api.ExecKeep, at most maxKeptExecs of them.
//
// A foreground exec lives in this node agent (proc.Proc, its output in memory)
// and ends with it (a parent-death signal: also when the agent is killed). A background exec runs under a keeper process of its own
// (package keeper): its output, meta.json and exit.json are files in
// DATA/execs/ID, so it outlives the agent (a crash, a kill -9, a restart), and
// the next agent finds it there when it starts (execTable.load), running or ended.
// Close ends the foreground execs; the background ones too on a node without a
// holder (whose sessions end with it as well).

// Exec bounds of a node.
const (
	// maxRunningExecs is how many execs a node runs at once.
	maxRunningExecs = 64
	// maxKeptExecs is how many ended execs a node keeps (the oldest go first).
	maxKeptExecs = 256
	// execHead and execTail are how much of each stream the node keeps: its first
	// and its newest bytes (a reply cuts from them). A background exec's chunk
	// files are execTail bytes each (keeper: the first, and the newest two).
	execHead = api.MaxExecOutputBytes / 2
	execTail = 1 << 20
	// execSandboxWait bounds the wait for the sandbox wrapper to confine itself.
	execSandboxWait = 10 * time.Second
	// execEndWait bounds the wait for a killed exec to end (its keeper to record it).
	execEndWait = 10 * time.Second
)

// execProc is what the exec verbs use of a process: a *proc.Proc (foreground)
// or a *keeper.Exec (background).
type execProc interface {
	Exit() (proc.Exit, bool)
	Wait(ctx context.Context) (proc.Exit, bool)
	Kill()
	Cut(stream string, budget int) (text []byte, omitted, length int64)
	ReadAt(stream string, from int64, limit int) (data []byte, off, end, oldest int64, err error)
	Started() time.Time
	Duration() time.Duration
}

// execEntry is one exec the node ran or runs.
type execEntry struct {
	id         string
	argv       []string
	owner      string // the principal that started it
	background bool
	p          execProc
	timedOut   bool // guarded by execTable.mu
}

// kept is x's keeper-backed exec, nil for one in this agent.
func (x *execEntry) kept() *keeper.Exec {
	k, _ := x.p.(*keeper.Exec)
	return k
}

// execTable is the node's execs.
type execTable struct {
	mu     sync.Mutex // guards the fields below and execEntry.timedOut
	m      map[string]*execEntry
	order  []string // ids, oldest first
	closed bool
	// spare is a sandbox wrapper started ahead (spare.go); refilling while one
	// is being started, by a goroutine spares counts.
	spare     *spare
	refilling bool
	spares    sync.WaitGroup
	// ns is the mount namespace prepared for execs (spare.go); nsTried once
	// one could not be made.
	ns      *sandbox.Namespace
	nsTried bool
}

// add registers x; refused past maxRunningExecs running or once closed.
func (t *execTable) add(node string, x *execEntry) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return api.Errorf(api.CodeUnavailable, "node %s is shutting down", node)
	}
	if t.m == nil {
		t.m = map[string]*execEntry{}
	}
	running := 0
	for _, e := range t.m {
		if _, done := e.p.Exit(); !done {
			running++
		}
	}
	if running >= maxRunningExecs {
		return api.Errorf(api.CodeLimit, "node %s runs %d execs (limit %d): wait for one or end it", node, running, maxRunningExecs)
	}
	t.pruneLocked(1)
	t.order = append(t.order, x.id)
	t.m[x.id] = x
	return nil
}

// pruneLocked forgets the oldest ended execs past maxKeptExecs-room, and those
// kept past ExecKeep; a background exec's directory goes with it (t.mu held).
func (t *execTable) pruneLocked(room int) {
	ended := 0
	for _, e := range t.m {
		if _, done := e.p.Exit(); done {
			ended++
		}
	}
	kept := t.order[:0]
	for _, id := range t.order {
		e := t.m[id]
		ex, done := e.p.Exit()
		if done && (ended > maxKeptExecs-room || time.Since(e.p.Started().Add(ex.Duration)) > api.ExecKeep) {
			delete(t.m, id)
			ended--
			if k := e.kept(); k != nil {
				_ = k.Remove()
			}
			continue
		}
		kept = append(kept, id)
	}
	t.order = kept
}

// load registers the background execs found in dir (DATA/execs), running and
// ended, oldest first, and forgets those past the bounds.
func (t *execTable) load(dir string) error {
	xs, err := keeper.Scan(dir)
	if err != nil {
		return err
	}
	sort.Slice(xs, func(a, b int) bool { return xs[a].Started().Before(xs[b].Started()) })
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*execEntry{}
	}
	for _, k := range xs {
		if t.m[k.ID()] != nil {
			continue
		}
		t.m[k.ID()] = &execEntry{id: k.ID(), argv: k.Argv(), owner: k.Owner(), background: true, p: k}
		t.order = append(t.order, k.ID())
	}
	t.pruneLocked(0)
	return nil
}

func (t *execTable) get(node, id string) (*execEntry, error) {
	if err := api.ValidName(id); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "exec id: %v", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.m[id]
	if x == nil {
		return nil, api.Errorf(api.CodeNotFound, "no exec %s/%s (ended execs are kept %s, at most %d)", node, id, api.ExecKeep, maxKeptExecs)
	}
	return x, nil
}

// close kills every running exec of this agent and the spare wrapper, and
// waits until they have ended; the background execs too unless keepBackground
// (they outlive the agent).
func (t *execTable) close(keepBackground bool) {
	t.mu.Lock()
	t.closed = true
	all := make([]*execEntry, 0, len(t.m))
	for _, x := range t.m {
		if keepBackground && x.kept() != nil {
			continue
		}
		all = append(all, x)
	}
	s := t.spare
	t.spare = nil
	t.mu.Unlock()
	if s != nil {
		s.end()
	}
	for _, x := range all {
		x.p.Kill()
	}
	ctx, cancel := context.WithTimeout(context.Background(), execEndWait)
	defer cancel()
	for _, x := range all {
		if _, ended := x.p.Wait(ctx); !ended {
			continue
		}
		if p, ok := x.p.(*proc.Proc); ok { // reaped: the wrapper exits after its report
			p.Close()
		}
	}
	t.spares.Wait() // a spare being started sees closed and ends it
	if t.ns != nil {
		t.ns.Close()
	}
}

// newExecID is a fresh exec id: "x" and 12 random hex digits.
func newExecID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "x" + hex.EncodeToString(b[:])
}

// execArgv checks r's program and returns its argv (a command: sh -c).
func execArgv(r api.ExecRequest) ([]string, error) {
	switch {
	case len(r.Argv) > 0 && r.Command != "":
		return nil, api.Errorf(api.CodeBadRequest, "give argv or command, not both")
	case len(r.Argv) == 0 && strings.TrimSpace(r.Command) == "":
		return nil, api.Errorf(api.CodeBadRequest, "give argv or command")
	}
	argv := r.Argv
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-c", r.Command}
	}
	total := 0
	for _, a := range argv {
		total += len(a) + 1
		if strings.IndexByte(a, 0) >= 0 {
			return nil, api.Errorf(api.CodeBadRequest, "argv holds a NUL byte")
		}
	}
	if argv[0] == "" {
		return nil, api.Errorf(api.CodeBadRequest, "argv[0] is empty")
	}
	if total > api.MaxCommandBytes {
		return nil, api.Errorf(api.CodeTooLarge, "argv of %d bytes (limit %d)", total, api.MaxCommandBytes)
	}
	return argv, nil
}

// checkExecRequest checks the bounds of r beside its program.
func checkExecRequest(r *api.ExecRequest) error {
	switch {
	case r.TimeoutMS < 0 || r.MaxOutputBytes < 0:
		return api.Errorf(api.CodeBadRequest, "timeout_ms and max_output_bytes must not be negative")
	case r.Stdin != nil && len(*r.Stdin) > api.MaxExecStdinBytes:
		return api.Errorf(api.CodeTooLarge, "stdin of %d bytes (limit %d)", len(*r.Stdin), api.MaxExecStdinBytes)
	case len(r.Env) > 256:
		return api.Errorf(api.CodeTooLarge, "%d environment variables (limit 256)", len(r.Env))
	}
	for k, v := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 || len(k)+len(v) > 32<<10 {
			return api.Errorf(api.CodeBadRequest, "environment variable %q: a name without = or NUL, a value without NUL, under 32 KiB", api.OneLine(k, 64))
		}
	}
	if r.MaxOutputBytes == 0 {
		r.MaxOutputBytes = api.DefaultExecOutputBytes
	}
	r.MaxOutputBytes = min(r.MaxOutputBytes, api.MaxExecOutputBytes)
	return nil
}

// execTimeout is an exec's timeout.
func execTimeout(ms int) time.Duration {
	if ms <= 0 {
		return api.DefaultExecTimeout
	}
	return min(time.Duration(ms)*time.Millisecond, api.MaxWait)
}

func (n *Node) exec(ctx context.Context, req request) (any, error) {
	var r api.ExecRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	argv, err := execArgv(r)
	if err != nil {
		return nil, err
	}
	if err := checkExecRequest(&r); err != nil {
		return nil, err
	}
	w := writerOf(req)
	if err := n.guard.CheckExec(ctx, w, argv, r.Env, req.decision); err != nil {
		return nil, err // decided before anything starts
	}
	dir := r.Cwd
	if dir == "" {
		dir, _ = os.UserHomeDir()
	}
	if fi, err := os.Stat(dir); dir != "" && (err != nil || !fi.IsDir()) {
		return nil, api.Errorf(api.CodeBadRequest, "cwd %q is not a directory on node %s", api.OneLine(dir, 256), n.cfg.Name)
	}
	// Kept redacted, as a session's output is: a read at any offset sees no
	// piece of a secret (reads are redacted again, for a newer policy).
	spec := proc.Spec{Argv: argv, Dir: dir, Env: proc.Environ(os.Environ(), r.Env), HeadBytes: execHead, TailBytes: execTail, Redact: n.execRedactor}
	if r.Stdin != nil {
		spec.Stdin = []byte(*r.Stdin)
	}
	x := &execEntry{id: newExecID(), argv: argv, owner: w.Principal, background: r.Background}
	p, err := n.startExec(ctx, x, spec, w)
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, execTimeout(r.TimeoutMS))
	defer cancel()
	if _, done := p.Wait(tctx); !done && !r.Background {
		// Its timeout passed, or its caller left: it ends with its process group.
		n.execs.mu.Lock()
		x.timedOut = true
		n.execs.mu.Unlock()
		p.Kill()
		p.Wait(context.Background())
	}
	res := n.execResult(x, r.MaxOutputBytes)
	n.traceExec(ctx, res)
	return res, nil
}

// startExec starts x's process for w, under the sandbox profile the policy
// chooses for w as it would for a session of w's, and kept out of the node's
// data dir as every session is (fail closed: a profile
// the kernel cannot enforce, or a wrapper that cannot confine itself, starts
// nothing), and registers x (a table that is full or closed ends it at once).
// A background exec starts under a keeper (startKept), never in the spare.
func (n *Node) startExec(ctx context.Context, x *execEntry, spec proc.Spec, w guard.Writer) (execProc, error) {
	if err := n.guard.Loaded(ctx); err != nil { // the sandbox is chosen by the policy in force
		return nil, err
	}
	prof, err := n.sandboxFor(api.CreateRequest{}, w, "")
	if err != nil {
		return nil, err
	}
	var wrapped *sandbox.Wrapped
	var p execProc
	unprivileged := false
	if hide := n.hidden(); prof != nil || len(hide) > 0 {
		// A program that is not there is the caller's mistake (bad_request, as
		// unwrapped), not the sandbox's: the wrapper would only fail at its exec.
		prog := spec.Argv[0]
		if strings.Contains(prog, "/") && !filepath.IsAbs(prog) {
			prog = filepath.Join(spec.Dir, prog) // as the exec in its cwd sees it
		}
		if _, err := exec.LookPath(prog); err != nil {
			return nil, api.Errorf(api.CodeBadRequest, "exec on node %s: %v", n.cfg.Name, err)
		}
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		ss := sandbox.Spec{Profile: prof, Hide: hide, Cgroup: "x-" + hex.EncodeToString(rnd[:])}
		if !x.background {
			if sp, sw := n.useSpare(spec, ss); sp != nil {
				p, wrapped = sp, sw
			}
		}
		if p == nil {
			if wrapped, err = sandbox.WrapIn("", n.execNS(), ss, spec.Argv); err != nil {
				return nil, api.Errorf(api.CodeSandbox, "exec on node %s: %v: nothing was started", n.cfg.Name, err)
			}
			spec.Argv = wrapped.Argv
			if !x.background { // a keeper makes its own status pipe
				if spec.Status, err = wrapped.Status(); err != nil {
					wrapped.Close()
					return nil, api.Errorf(api.CodeInternal, "exec on node %s: %v: nothing was started", n.cfg.Name, err)
				}
			}
			if len(hide) > 0 {
				spec.Attr = sandbox.Unprivileged // its mounts, on a node without root
				unprivileged = true
			}
			spec.ExtraFiles = make([]*os.File, sandbox.FD-3, sandbox.FD-3+len(wrapped.Child))
			spec.ExtraFiles = append(spec.ExtraFiles, wrapped.Child...)
		}
	}
	if p == nil {
		if x.background {
			p, err = n.startKept(x, spec, unprivileged)
		} else {
			attr := spec.Attr
			spec.Attr = func(a *syscall.SysProcAttr) {
				if attr != nil {
					attr(a)
				}
				a.Pdeathsig = syscall.SIGKILL // a foreground exec dies with the agent, even with one killed by SIGKILL
			}
			p, err = proc.Start(spec)
		}
		if err != nil {
			if wrapped != nil {
				wrapped.CloseChild()
			}
			if errors.Is(err, proc.ErrStart) {
				return nil, api.Errorf(api.CodeBadRequest, "exec on node %s: %v", n.cfg.Name, err)
			}
			return nil, api.Errorf(api.CodeInternal, "exec on node %s: %v: nothing was started", n.cfg.Name, err)
		}
	}
	if wrapped != nil {
		if err := wrapped.Wait(execSandboxWait); err != nil {
			n.endExec(p)
			if errors.Is(err, sandbox.ErrProgram) { // confined, but no such program: as unwrapped
				return nil, api.Errorf(api.CodeBadRequest, "exec on node %s: %v", n.cfg.Name, err)
			}
			return nil, api.Errorf(api.CodeSandbox, "exec on node %s: the sandbox did not confine it: %v: nothing was started", n.cfg.Name, err)
		}
	}
	x.p = p
	if err := n.execs.add(n.cfg.Name, x); err != nil {
		n.endExec(p)
		return nil, err
	}
	return p, nil
}

// endExec kills an exec that will not be registered and waits for it to end;
// a background exec's directory goes with it.
func (n *Node) endExec(p execProc) {
	p.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), execEndWait)
	defer cancel()
	if _, ended := p.Wait(ctx); ended {
		if k, ok := p.(*keeper.Exec); ok {
			_ = k.Remove()
		}
	}
}

// execsDir is where the background execs' directories are (DATA/execs).
func (n *Node) execsDir() string { return filepath.Join(n.cfg.DataDir, "execs") }

// startKept starts x's program under a keeper (package keeper): its spec goes
// on a pipe (the program's environment and stdin, the redact patterns in force
// now: what is written to disk is redacted), the sandbox wrapper's fds pass
// through at the same numbers.
func (n *Node) startKept(x *execEntry, spec proc.Spec, unprivileged bool) (*keeper.Exec, error) {
	shown := make([]string, len(x.argv))
	for i, a := range x.argv {
		shown[i] = n.redactText(a)
	}
	ks := keeper.Spec{ID: x.id, Argv: spec.Argv, Shown: shown, Owner: x.owner, Dir: spec.Dir, Env: spec.Env,
		Stdin: spec.Stdin, Unprivileged: unprivileged, Chunk: execTail}
	for i, f := range spec.ExtraFiles {
		if f != nil {
			ks.FDs = append(ks.FDs, 3+i)
		}
	}
	if pol := n.guard.Redaction(); pol != nil {
		for _, r := range pol.Redacts {
			ks.Redacts = append(ks.Redacts, keeper.Pattern{Name: r.Name, Pattern: r.Pattern})
		}
	}
	if err := datadir.Mkdir(n.execsDir()); err != nil {
		return nil, err
	}
	return keeper.Start("", filepath.Join(n.execsDir(), x.id), ks, spec.ExtraFiles)
}

// execResult is x as the API shows it, each stream cut to budget bytes and
// redacted.
func (n *Node) execResult(x *execEntry, budget int) api.ExecResult {
	p := x.p
	argv := make([]string, len(x.argv))
	for i, a := range x.argv {
		argv[i] = n.redactText(a) // a secret in an argument is no viewer's
	}
	res := api.ExecResult{Node: n.cfg.Name, ExecID: x.id, Argv: argv, State: api.ExecRunning,
		Background: x.background, StartedAt: p.Started().UTC()}
	if ex, done := p.Exit(); done {
		res.State = api.ExecDone
		code := ex.Code
		res.ExitCode, res.Signal = &code, ex.Signal
	}
	res.DurationMS = p.Duration().Milliseconds()
	out, omitted, length := p.Cut(api.StreamStdout, budget)
	res.Stdout, res.StdoutOmitted, res.StdoutBytes = n.redactText(string(out)), omitted, length
	out, omitted, length = p.Cut(api.StreamStderr, budget)
	res.Stderr, res.StderrOmitted, res.StderrBytes = n.redactText(string(out)), omitted, length
	n.execs.mu.Lock()
	res.TimedOut = x.timedOut
	n.execs.mu.Unlock()
	return res
}

func (n *Node) execGet(ctx context.Context, req request) (any, error) {
	var r api.ExecTarget
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	x, err := n.execs.get(n.cfg.Name, r.ExecID)
	if err != nil {
		return nil, err
	}
	return n.execResult(x, execBudget(r.MaxOutputBytes)), nil
}

func execBudget(b int) int {
	if b <= 0 {
		return api.DefaultExecOutputBytes
	}
	return min(b, api.MaxExecOutputBytes)
}

func (n *Node) execWait(ctx context.Context, req request) (any, error) {
	var r api.ExecTarget
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	if r.TimeoutMS < 0 {
		return nil, api.Errorf(api.CodeBadRequest, "timeout_ms must not be negative")
	}
	x, err := n.execs.get(n.cfg.Name, r.ExecID)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout(r.TimeoutMS))
	defer cancel()
	x.p.Wait(wctx)
	return n.execResult(x, execBudget(r.MaxOutputBytes)), nil
}

func (n *Node) execOutput(ctx context.Context, req request) (any, error) {
	var r api.ExecOutputRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	if r.From < 0 || r.Max < 0 {
		return nil, api.Errorf(api.CodeBadRequest, "from and max must not be negative")
	}
	if r.Stream == "" {
		r.Stream = api.StreamStdout
	}
	if r.Max == 0 || r.Max > api.MaxExecOutputBytes {
		r.Max = api.MaxExecOutputBytes
	}
	x, err := n.execs.get(n.cfg.Name, r.ExecID)
	if err != nil {
		return nil, err
	}
	_, done := x.p.Exit()
	data, off, end, oldest, err := x.p.ReadAt(r.Stream, r.From, r.Max)
	if err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	return api.ExecOutput{Stream: r.Stream, Offset: off, Next: off + int64(len(data)), Data: n.redactText(string(data)),
		End: end, Oldest: oldest, Done: done}, nil
}

func (n *Node) execKill(ctx context.Context, req request) (any, error) {
	var r api.ExecTarget
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	x, err := n.execs.get(n.cfg.Name, r.ExecID)
	if err != nil {
		return nil, err
	}
	w := writerOf(req)
	if w.Role != api.RoleAdmin && (x.owner == "" || x.owner != w.Principal) {
		return nil, api.Errorf(api.CodeForbidden, "exec %s/%s belongs to %s: only its owner or an admin may end it", n.cfg.Name, x.id, x.owner)
	}
	x.p.Kill()
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	x.p.Wait(kctx)
	return n.execResult(x, execBudget(r.MaxOutputBytes)), nil
}
