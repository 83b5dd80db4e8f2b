package agent

import (
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// DefaultFresh is how long a structured signal (hook, stream) stays believed
// over a screen that shows something else: past it, a hook that went silent (a
// Stop that never came after an API error or an interrupt) yields to the screen.
const DefaultFresh = 15 * time.Second

// Machine reconciles the signals of one agent's sources into its state. It is not
// safe for concurrent use (the Tracker holds its lock around it).
//
// The rules, in order:
//   - exited (from the process) wins over everything, and nothing follows it; a
//     final state from a hook (done, error) is kept likewise.
//   - the last structured signal (hook or stream) is the state, unless the
//     screen showed something else since that signal arrived, and either the
//     screen shows a dialog (waiting_permission, waiting_input) over a working
//     signal — the dialog beats a stale working once it was there for
//     DialogGrace, unless it was first seen within DialogSettle of an answer
//     to the agent's permission request (Answered): that request's own
//     dialog —, or the agent was
//     interrupted after the signal and the screen's state is from after the
//     interrupt (a CLI interrupted fires no hook: Claude Code no Stop; a state
//     the screen showed before the interrupt and still shows InterruptSettle
//     after it counts as seen after it), or the
//     signal is older than the freshness window (a hook silent past it falls
//     back to the screen).
//   - without structured signals, the screen's held state is the state.
//   - before any source said anything, the agent is spawning, then booting once
//     its process runs.
type Machine struct {
	fresh time.Duration

	cur  api.AgentSignal  // the state now (Source, State, Evidence, Time: since)
	hook *api.AgentSignal // the last structured signal
	scr  *api.AgentSignal // the screen's held state; Time: when it was first seen
	proc *api.AgentSignal // the process's (booting, exited)
	intr time.Time        // when the agent was last interrupted
	ansd time.Time        // when a structured source last answered its permission request
}

// DialogSettle is how long after a structured source answered the agent's
// permission request (a hook that allowed or denied it) a dialog first seen on
// the screen is taken for that request's own, still drawn or being taken down:
// Claude Code draws its dialog beside the waiting hook.
const DialogSettle = 3 * time.Second

// InterruptSettle is how long after the agent's interrupt keys were typed a
// screen that shows the same state as before them is taken for what came of the
// interrupt: the CLI has had time to act on the keys and redraw.
const InterruptSettle = time.Second

// DialogGrace is how long a dialog must be on the screen before it beats a
// working from a structured source: Claude Code draws its permission dialog as
// it runs the PermissionRequest hook, which says so itself once it arrives.
const DialogGrace = 1500 * time.Millisecond

// Answered notes that a structured source answered the agent's permission
// request at time at (Machine's rules: the CLI's dialog for it is no
// waiting_permission).
func (m *Machine) Answered(at time.Time) {
	if at.After(m.ansd) {
		m.ansd = at
	}
}

// NewMachine returns a machine in state spawning at time at.
func NewMachine(at time.Time, fresh time.Duration) *Machine {
	if fresh <= 0 {
		fresh = DefaultFresh
	}
	return &Machine{fresh: fresh, cur: api.AgentSignal{Source: api.SourceProcess, State: api.AgentSpawning, Time: at}}
}

// State is the reconciled state: its source, state, evidence and since when.
func (m *Machine) State() api.AgentSignal { return m.cur }

// Apply takes one signal and reconciles at now; it reports whether the state
// changed. A signal of an unknown source or state is ignored.
func (m *Machine) Apply(sig api.AgentSignal, now time.Time) bool {
	if !contains(api.AgentSources, sig.Source) || !api.ValidAgentState(sig.State) {
		return false
	}
	if sig.Time.IsZero() {
		sig.Time = now
	}
	sig.Evidence = bound(sig.Evidence, api.MaxEvidenceBytes)
	switch sig.Source {
	case api.SourceHook, api.SourceStream:
		m.hook = &sig
	case api.SourceScreen:
		switch {
		case m.scr == nil || m.scr.State != sig.State:
			m.scr = &sig
		case !m.intr.IsZero() && !m.scr.Time.After(m.intr) && !now.Before(m.intr.Add(InterruptSettle)):
			// The same state as before the interrupt, still on the screen once
			// the CLI had time to act on the keys: that is what came of it (a
			// screen that read ready while the tool waited for its hook reads
			// ready after the interrupt too).
			sig.Time = now
			m.scr = &sig
		default:
			m.scr.Evidence = sig.Evidence // the same state: still since it was first seen
		}
	case api.SourceProcess:
		m.proc = &sig
	}
	return m.Reconcile(now)
}

// Interrupt notes that the agent's interrupt keys were typed at time at (they
// were typed by then): what a structured source said before it is stale as soon
// as the screen shows a state it first showed after at. It reports whether the
// state changed.
func (m *Machine) Interrupt(at, now time.Time) bool {
	if at.After(m.intr) {
		m.intr = at
	}
	return m.Reconcile(now)
}

// Reconcile recomputes the state at now (the freshness window may have passed);
// it reports whether the state changed.
func (m *Machine) Reconcile(now time.Time) bool {
	if api.AgentFinal(m.cur.State) {
		return false
	}
	next := m.pick(now)
	if next == nil || next.State == m.cur.State {
		if next != nil && next.State == m.cur.State && next.Source == m.cur.Source {
			m.cur.Evidence = next.Evidence
		}
		if next != nil && next.State == m.cur.State && m.cur.Source == api.SourceScreen &&
			(next.Source == api.SourceHook || next.Source == api.SourceStream) {
			// The CLI's own signal confirms what the screen said first: the state
			// (still since the screen saw it) is now the signal's.
			m.cur.Source, m.cur.Evidence = next.Source, next.Evidence
		}
		return false
	}
	m.cur = api.AgentSignal{Source: next.Source, State: next.State, Evidence: next.Evidence, Time: now}
	return true
}

// pick is the signal the rules choose (nil: none yet).
func (m *Machine) pick(now time.Time) *api.AgentSignal {
	if m.proc != nil && api.AgentFinal(m.proc.State) {
		return m.proc
	}
	if m.hook != nil && api.AgentFinal(m.hook.State) {
		return m.hook
	}
	if m.hook != nil {
		if m.scr == nil || !m.scr.Time.After(m.hook.Time) {
			return m.hook // the screen has shown nothing new since the signal
		}
		dialog := m.scr.State == api.AgentWaitingPermission || m.scr.State == api.AgentWaitingInput
		if dialog && m.hook.State == api.AgentWorking && !m.scr.Time.Before(m.ansd.Add(DialogSettle)) &&
			now.Sub(m.scr.Time) >= DialogGrace {
			return m.scr // a dialog on the screen beats a stale working (but the answered one's)
		}
		if m.hook.Time.Before(m.intr) && m.scr.Time.After(m.intr) {
			return m.scr // interrupted: the screen since says what came of it
		}
		if now.Sub(m.hook.Time) > m.fresh {
			return m.scr // the hook went silent: the screen knows better
		}
		return m.hook
	}
	if m.scr != nil {
		return m.scr
	}
	return m.proc
}
