package node

import (
	"os"
	"syscall"
	"time"

	"github.com/fleetmux/fleetmux/internal/sandbox"
	"github.com/fleetmux/fleetmux/proc"
)

// A sandboxed exec starts through the sandbox wrapper, a re-executed copy of
// this binary, whose start-up (the Go runtime and every package's init,
// milliseconds) would be most of an exec of `true`. So once a node has run a
// sandboxed exec, it keeps one wrapper started ahead (sandbox.Later): it has done
// its start-up and waits, running nothing, for the next exec's spec on its pipe
// (the program, its dir and environment, the profile, the hidden paths), then
// confines itself and starts the program as a wrapper started for it would. An
// exec with stdin, and one that finds the spare dead, starts its wrapper cold.
// The spare is the exec table's: close ends it.
//
// On a node that runs as root, the refill also keeps a mount namespace prepared
// with the hidden paths masked (sandbox.Prepare), which the spare and the cold
// wrappers join when their spec fits it: no namespace is made and torn down per
// exec. A new one is made when the hidden paths or the node's mount table
// change; where none can be made, every wrapper masks for itself.

// spare is a wrapper started ahead and its process.
type spare struct {
	p *proc.Proc
	w *sandbox.Wrapped
}

// end stops a spare that will not be used (it reads an empty spec and runs nothing).
func (s *spare) end() {
	s.w.Close()
	s.p.Kill()
	<-s.p.Done()
}

// takeSpare returns the spare wrapper when one waits alive (nil otherwise), and
// has the next one started.
func (n *Node) takeSpare() *spare {
	t := &n.execs
	t.mu.Lock()
	s := t.spare
	t.spare = nil
	if !t.closed && !t.refilling {
		t.refilling = true
		t.spares.Add(1)
		go n.refillSpare() // owned by the exec table: close waits for it
	}
	t.mu.Unlock()
	if s != nil {
		if _, ended := s.p.Exit(); ended {
			s.end()
			return nil
		}
	}
	return s
}

// refillSpare starts the next spare and keeps it (ends it when the table closed).
func (n *Node) refillSpare() {
	t := &n.execs
	defer t.spares.Done()
	s, err := n.startSpare(n.prepareNS())
	t.mu.Lock()
	t.refilling = false
	keep := err == nil && !t.closed && t.spare == nil
	if keep {
		t.spare = s
	}
	t.mu.Unlock()
	if err != nil {
		n.log.Debug("no spare exec wrapper", "err", err)
	}
	if !keep && s != nil {
		s.end()
	}
}

// startSpare starts a wrapper that waits for its spec, with the environment an
// exec gets without extras (never the node's credentials) and stdin /dev/null,
// holding ns (nil: none) to join.
func (n *Node) startSpare(ns *sandbox.Namespace) (*spare, error) {
	w, err := sandbox.LaterIn("", ns)
	if err != nil {
		return nil, err
	}
	status, err := w.Status()
	if err != nil {
		w.Close()
		return nil, err
	}
	spec := proc.Spec{Argv: w.Argv, Dir: "/", Env: proc.Environ(os.Environ(), nil), HeadBytes: execHead, TailBytes: execTail, Redact: n.execRedactor, Status: status}
	unprivileged := len(n.hidden()) > 0
	spec.Attr = func(a *syscall.SysProcAttr) {
		if unprivileged {
			sandbox.Unprivileged(a) // its mounts, on a node without root
		}
		// A spare runs foreground execs only: it dies with the agent, even one
		// killed by SIGKILL, as a foreground exec started cold does (and the
		// wrapper hands the signal on to its program).
		a.Pdeathsig = syscall.SIGKILL
	}
	spec.ExtraFiles = make([]*os.File, sandbox.FD-3, sandbox.FD-3+len(w.Child))
	spec.ExtraFiles = append(spec.ExtraFiles, w.Child...)
	p, err := proc.Start(spec)
	w.CloseChild()
	if err != nil {
		w.Close()
		return nil, err
	}
	return &spare{p: p, w: w}, nil
}

// useSpare runs spec's program in a spare wrapper under ss: its process (timed
// from now), or nil when there is no spare or spec needs what a spare cannot
// give (stdin, more files).
func (n *Node) useSpare(spec proc.Spec, ss sandbox.Spec) (*proc.Proc, *sandbox.Wrapped) {
	if spec.Stdin != nil || len(spec.ExtraFiles) > 0 {
		return nil, nil
	}
	s := n.takeSpare()
	if s == nil {
		return nil, nil
	}
	ss.Argv, ss.Dir, ss.Env = spec.Argv, spec.Dir, spec.Env
	if err := s.w.Send(ss); err != nil {
		s.end()
		return nil, nil
	}
	s.p.Restart(time.Now())
	return s.p, s.w
}

// execNS is the mount namespace prepared for execs, nil while there is none.
func (n *Node) execNS() *sandbox.Namespace {
	t := &n.execs
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ns
}

// prepareNS returns the mount namespace prepared for execs, making it when the
// node masks its hidden paths as root and has none that shows them as they are
// now (a new one when they or the node's mount table changed). A node that
// could not make one does not try again. Only refillSpare calls it.
func (n *Node) prepareNS() *sandbox.Namespace {
	hide := n.hidden()
	if os.Geteuid() != 0 || len(hide) == 0 || !canHide() {
		return nil
	}
	t := &n.execs
	t.mu.Lock()
	cur, tried := t.ns, t.nsTried
	t.mu.Unlock()
	if cur != nil && cur.Hides(hide) && !cur.Stale() {
		return cur
	}
	if cur == nil && tried {
		return nil
	}
	ns, err := sandbox.Prepare("", hide)
	if err != nil {
		n.log.Debug("no prepared mount namespace for execs", "err", err)
	}
	t.mu.Lock()
	t.nsTried = true
	if t.closed {
		t.mu.Unlock()
		if ns != nil {
			ns.Close()
		}
		return nil
	}
	old := t.ns
	t.ns = ns
	t.mu.Unlock()
	if old != nil {
		old.Close() // the wrappers that hold it keep it until they exec
	}
	return ns
}

// execRedactor is the redactor of an exec's stream under the redaction in force
// when the stream's first bytes come (nil: nothing to redact).
func (n *Node) execRedactor() proc.Redactor {
	p := n.guard.Redaction()
	if p == nil || len(p.Redacts) == 0 {
		return nil
	}
	return p.NewRedactor()
}
