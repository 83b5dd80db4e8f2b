// Package agent knows coding agents (DESIGN "Agents"): their drivers (the CLI, its
// versioned screen rules, how to submit and interrupt), the state machine that
// reconciles what each source says of an agent (hooks, streams, screen rules, the
// process), and the Tracker, the node's registry of its agents, which samples each
// agent's screen and publishes every change of state.
//
// The node wires it: it starts each agent's session and hands the Tracker a
// Session (what the tracker may do with it); structured sources (hooks) report
// through Tracker.Signal.
package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// Sentinels.
var (
	ErrNoAgent       = errors.New("no such agent")
	ErrUnknownDriver = errors.New("unknown driver")
	ErrClosed        = errors.New("tracker closed")
)

// Session is what the tracker needs of an agent's session. Its methods must be
// safe for concurrent use and must not block on the program.
type Session interface {
	// Screen renders the session's screen now (off the PTY's read path: the
	// session builds it from its scrollback).
	Screen() (api.Screen, error)
	// OutputEnd is the end offset of the session's output: while it stays the
	// same, so does the screen.
	OutputEnd() int64
	// Exited reports whether the program has exited, with its exit code when
	// known.
	Exited() (code *int, exited bool)
	// Type types text (when not empty), then after delay the named keys: the
	// driver's own typing (the spawn's first prompt, first-run answers).
	Type(ctx context.Context, text string, delay time.Duration, keys ...string) error
}

// DefaultSample is how often the tracker looks at an agent's screen.
const DefaultSample = 150 * time.Millisecond

// Config configures a Tracker.
type Config struct {
	// Node is the node's name (the agents' addresses, events).
	Node string
	// Publish is called with every event of every agent, in order per agent. It
	// must not block (the node queues them for the bus).
	Publish func(api.AgentEvent)
	// Sample is how often each agent's screen is sampled (default DefaultSample).
	Sample time.Duration
	// Fresh is the freshness window of structured signals (default DefaultFresh).
	Fresh  time.Duration
	Logger *slog.Logger
}

// Tracker is a node's registry of its agents. Its methods are safe for concurrent
// use. Every agent has one sampling goroutine, which Remove and Close end.
type Tracker struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	agents map[string]*tracked
	closed bool
	wg     sync.WaitGroup
}

// tracked is one agent. Fields above mu's line are fixed at Add.
type tracked struct {
	d      *Driver
	s      Session
	cancel context.CancelFunc
	done   chan struct{} // closed when the sampler returned

	// guarded by Tracker.mu
	meta     api.Agent
	m        *Machine
	changed  chan struct{} // closed (and replaced) on every change
	prompt   string        // the first prompt, typed once it is first ready
	wasReady bool
	// submitted is when a prompt was submitted to it while its state had not
	// changed since (zero: none pending): until the state changes, or
	// SubmitGrace passed, its ready is the turn before that prompt's.
	submitted time.Time
	turns     []api.AgentTurn // the last api.MaxAgentTurns, oldest first
	turnSeq   int64
}

// SubmitGrace bounds how long a ready agent given a prompt counts as not ready
// for Wait while no source says it started the prompt's turn (a CLI that took
// the prompt without starting a turn, or one too quick for the screen).
const SubmitGrace = 5 * time.Second

// NewTracker returns an empty tracker.
func NewTracker(cfg Config) *Tracker {
	if cfg.Sample <= 0 {
		cfg.Sample = DefaultSample
	}
	if cfg.Fresh <= 0 {
		cfg.Fresh = DefaultFresh
	}
	if cfg.Publish == nil {
		cfg.Publish = func(api.AgentEvent) {}
	}
	t := &Tracker{cfg: cfg, log: cfg.Logger, agents: map[string]*tracked{}}
	if t.log == nil {
		t.log = slog.Default()
	}
	return t
}

// Add starts tracking the agent meta (its ID, Driver, Parent, … set; its state
// fields are the tracker's) run by d in s; prompt, when not empty, is typed and
// submitted once the agent is first ready.
func (t *Tracker) Add(meta api.Agent, d *Driver, s Session, prompt string) error {
	now := time.Now().UTC()
	ctx, cancel := context.WithCancel(context.Background())
	a := &tracked{d: d, s: s, cancel: cancel, done: make(chan struct{}), meta: meta,
		m: NewMachine(now, t.cfg.Fresh), changed: make(chan struct{}), prompt: prompt}
	a.meta.Node, a.meta.Rules = t.cfg.Node, d.Rules.Version
	if a.meta.CreatedAt.IsZero() {
		a.meta.CreatedAt = now
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		cancel()
		return ErrClosed
	}
	if _, dup := t.agents[meta.ID]; dup {
		cancel()
		return errors.New("agent " + meta.ID + " is tracked already")
	}
	t.agents[meta.ID] = a
	a.m.Apply(api.AgentSignal{Source: api.SourceProcess, State: api.AgentBooting, Evidence: "process started", Time: now}, now)
	t.eventLocked(a, api.AgentEventSpawned, api.AgentSpawning)
	t.wg.Add(1)
	go t.sample(ctx, a)
	return nil
}

// Signal feeds one observation of agent id's state from a structured source
// (api.SourceHook, api.SourceStream): the Claude Code hooks, Codex notify and
// OpenCode's event stream report through it. The tracker reconciles it with the
// screen and the process (Machine) and publishes the change, if any. A zero
// sig.Time means now. It does not block; ErrNoAgent for an agent it does not
// track.
func (t *Tracker) Signal(ctx context.Context, id string, sig api.AgentSignal) error {
	if sig.Source != api.SourceHook && sig.Source != api.SourceStream {
		return errors.New("agent signal: source must be hook or stream, not " + strconv.Quote(sig.Source))
	}
	if !api.ValidAgentState(sig.State) {
		return errors.New("agent signal: unknown state " + strconv.Quote(sig.State))
	}
	return t.apply(id, sig)
}

// Interrupted notes that agent id's interrupt keys were typed at time at: the
// structured sources' word from before it yields to the screen as soon as the
// screen shows a state it first showed after at (Machine.Interrupt), since a
// CLI interrupted may report nothing (Claude Code fires no Stop). ErrNoAgent
// for an agent it does not track.
func (t *Tracker) Interrupted(id string, at time.Time) error {
	now := time.Now().UTC()
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	if a == nil {
		return ErrNoAgent
	}
	prev := a.m.State().State
	if a.m.Interrupt(at.UTC(), now) {
		t.eventLocked(a, api.AgentEventState, prev)
	}
	return nil
}

// AddTurn records an entry of agent id's turns (its Seq is the tracker's; a
// zero Time is now; texts are cut to api.MaxTurnText), keeping the last
// api.MaxAgentTurns. The caller redacts. ErrNoAgent for an agent it does not
// track.
func (t *Tracker) AddTurn(id string, e api.AgentTurn) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	if a == nil {
		return ErrNoAgent
	}
	a.turnSeq++
	e.Seq = a.turnSeq
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	e.Tool, e.Input, e.Text = bound(e.Tool, 128), bound(e.Input, api.MaxTurnText), bound(e.Text, api.MaxTurnText)
	if len(a.turns) >= api.MaxAgentTurns {
		a.turns = slices.Delete(a.turns, 0, len(a.turns)-api.MaxAgentTurns+1)
	}
	a.turns = append(a.turns, e)
	return nil
}

// Turns returns agent id's last turns, oldest first (nil for none, or no such
// agent).
func (t *Tracker) Turns(id string) []api.AgentTurn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.agents[id]; a != nil {
		return slices.Clone(a.turns)
	}
	return nil
}

// Answered notes that a structured source (the node, for a hook) answered
// agent id's permission request at time at: the CLI's own dialog for it, still
// on the screen, is not a waiting_permission (Machine.Answered). ErrNoAgent for
// an agent it does not track.
func (t *Tracker) Answered(id string, at time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	if a == nil {
		return ErrNoAgent
	}
	a.m.Answered(at)
	return nil
}

// Submitted notes that a prompt was submitted to agent id (its Enter typed by
// time at). While no state change came after at, for at most SubmitGrace, Wait
// does not count its ready: `send` then `wait --state ready` waits for that
// prompt's turn to end, not the turn before. ErrNoAgent for an agent it does
// not track.
func (t *Tracker) Submitted(id string, at time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	if a == nil {
		return ErrNoAgent
	}
	t.submittedLocked(a, at)
	return nil
}

func (t *Tracker) submittedLocked(a *tracked, at time.Time) {
	if a.m.State().Time.After(at) {
		return // the state changed since: the prompt's turn is under way, or done
	}
	a.submitted = at
	t.notifyLocked(a)
}

// pendingLocked is how long a's ready stays the turn before a submitted prompt
// (0: it does not).
func (a *tracked) pendingLocked(now time.Time) time.Duration {
	if a.m.State().State != api.AgentReady {
		return 0
	}
	if a.prompt != "" {
		return SubmitGrace // the spawn's prompt, typed at the next sample
	}
	if a.submitted.IsZero() {
		return 0
	}
	return max(0, SubmitGrace-now.Sub(a.submitted))
}

// SetUsage records what agent id's CLI reported of its consumption through a
// structured source (api.SourceHook, api.SourceStream). Past one of the agent's
// caps the agent is marked error with the reason (from that source) and its
// driver's interrupt keys are typed, so it stops spending.
func (t *Tracker) SetUsage(id, source string, u api.AgentUsage) error {
	if source != api.SourceHook && source != api.SourceStream {
		return errors.New("agent usage: source must be hook or stream, not " + strconv.Quote(source))
	}
	now := time.Now().UTC()
	t.mu.Lock()
	a := t.agents[id]
	if a == nil {
		t.mu.Unlock()
		return ErrNoAgent
	}
	a.meta.Usage = &u
	t.cfg.Publish(api.AgentEvent{Type: api.AgentEventUsage, Node: t.cfg.Node, Agent: id, Time: now, Usage: &u})
	t.notifyLocked(a)
	reason := capReached(a.meta.Caps, u)
	prev := a.m.State().State
	capped := reason != "" && !api.AgentFinal(prev) &&
		a.m.Apply(api.AgentSignal{Source: source, State: api.AgentError, Evidence: reason, Time: now}, now)
	if capped {
		t.eventLocked(a, api.AgentEventState, prev)
	}
	t.mu.Unlock()
	if capped {
		if err := a.s.Type(context.Background(), "", 0, a.d.Interrupt...); err != nil {
			t.log.Warn("agent past its cap not interrupted", "agent", id, "err", err)
		}
	}
	return nil
}

// capReached says which of caps u is past ("" for none).
func capReached(caps *api.AgentCaps, u api.AgentUsage) string {
	switch {
	case caps == nil:
	case caps.MaxCostUSD > 0 && u.CostUSD > caps.MaxCostUSD:
		return "cap: cost $" + strconv.FormatFloat(u.CostUSD, 'f', 2, 64) + " is past max_cost_usd $" + strconv.FormatFloat(caps.MaxCostUSD, 'f', 2, 64)
	case caps.MaxTurns > 0 && u.Turns > caps.MaxTurns:
		return "cap: " + strconv.Itoa(u.Turns) + " turns are past max_turns " + strconv.Itoa(caps.MaxTurns)
	}
	return ""
}

func (t *Tracker) apply(id string, sig api.AgentSignal) error {
	now := time.Now().UTC()
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	if a == nil {
		return ErrNoAgent
	}
	prev := a.m.State().State
	if a.m.Apply(sig, now) {
		t.eventLocked(a, api.AgentEventState, prev)
	}
	return nil
}

// eventLocked publishes the agent's state as an event of type typ and wakes its
// waiters.
func (t *Tracker) eventLocked(a *tracked, typ, prev string) {
	cur := a.m.State()
	if cur.State == api.AgentReady {
		a.wasReady = true
	}
	if cur.Time.After(a.submitted) {
		a.submitted = time.Time{} // the state changed after the prompt
	}
	t.cfg.Publish(api.AgentEvent{Type: typ, Node: t.cfg.Node, Agent: a.meta.ID, Time: cur.Time,
		State: cur.State, Previous: prev, Source: cur.Source, Evidence: cur.Evidence})
	t.notifyLocked(a)
}

func (t *Tracker) notifyLocked(a *tracked) {
	close(a.changed)
	a.changed = make(chan struct{})
}

// Get returns agent id as the API shows it, with its children on this node.
func (t *Tracker) Get(id string) (api.Agent, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	if a == nil {
		return api.Agent{}, false
	}
	return t.wireLocked(a), true
}

// Driver returns the driver of agent id.
func (t *Tracker) Driver(id string) (*Driver, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.agents[id]
	if a == nil {
		return nil, false
	}
	return a.d, true
}

// List returns every agent, ordered by id number.
func (t *Tracker) List() []api.Agent {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]api.Agent, 0, len(t.agents))
	for _, a := range t.agents {
		out = append(out, t.wireLocked(a))
	}
	slices.SortFunc(out, func(x, y api.Agent) int { return idOrder(x.ID, y.ID) })
	return out
}

// Children returns the ids of this node's agents whose parent is the agent at
// addr ("NODE/ID").
func (t *Tracker) Children(addr string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.childrenLocked(addr)
}

func (t *Tracker) childrenLocked(addr string) []string {
	var out []string
	for id, a := range t.agents {
		if a.meta.Parent == addr {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, idOrder)
	return out
}

func (t *Tracker) wireLocked(a *tracked) api.Agent {
	out := a.meta
	cur := a.m.State()
	out.State, out.StateSource, out.StateSince, out.Evidence = cur.State, cur.Source, cur.Time, cur.Evidence
	out.Children = nil
	for _, id := range t.childrenLocked(out.Address()) {
		out.Children = append(out.Children, t.cfg.Node+"/"+id)
	}
	if a.meta.Labels != nil {
		out.Labels = make(map[string]string, len(a.meta.Labels))
		for k, v := range a.meta.Labels {
			out.Labels[k] = v
		}
	}
	return out
}

// Wait waits until agent id is in one of states (or in a final state, or no
// longer tracked) or ctx is done, and returns it as it is then; ok says whether
// it reached one of states. A ready agent just given a prompt (Submitted) is
// not ready for it until its state changed, or SubmitGrace passed. ErrNoAgent
// for an agent it does not track.
func (t *Tracker) Wait(ctx context.Context, id string, states []string) (api.Agent, bool, error) {
	var last api.Agent
	for {
		t.mu.Lock()
		a := t.agents[id]
		if a == nil {
			t.mu.Unlock()
			if last.ID == "" {
				return api.Agent{}, false, ErrNoAgent
			}
			return last, slices.Contains(states, last.State), nil
		}
		last = t.wireLocked(a)
		ch := a.changed
		pending := a.pendingLocked(time.Now())
		t.mu.Unlock()
		if slices.Contains(states, last.State) && pending == 0 {
			return last, true, nil
		}
		if api.AgentFinal(last.State) {
			return last, false, nil
		}
		var expire <-chan time.Time
		var tm *time.Timer
		if pending > 0 {
			tm = time.NewTimer(pending)
			expire = tm.C
		}
		select {
		case <-ch:
		case <-expire:
		case <-ctx.Done():
			return last, false, ctx.Err()
		}
		if tm != nil {
			tm.Stop()
		}
	}
}

// Remove stops tracking agent id (its session was closed): its sampler ends,
// an ended event is published. It reports whether it was tracked.
func (t *Tracker) Remove(id string) bool {
	t.mu.Lock()
	a := t.agents[id]
	if a == nil {
		t.mu.Unlock()
		return false
	}
	delete(t.agents, id)
	cur := a.m.State()
	t.cfg.Publish(api.AgentEvent{Type: api.AgentEventEnded, Node: t.cfg.Node, Agent: id, Time: time.Now().UTC(), State: cur.State, Source: cur.Source, Evidence: cur.Evidence})
	t.notifyLocked(a)
	t.mu.Unlock()
	a.cancel()
	<-a.done
	return true
}

// Close stops every sampler and waits for them. Agents are not ended (their
// sessions are the node's).
func (t *Tracker) Close() {
	t.mu.Lock()
	t.closed = true
	for _, a := range t.agents {
		a.cancel()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// sample is agent a's sampler: every Sample it reads the screen (again only when
// output came), evaluates the driver's rules, and feeds the machine; it notes the
// process's exit. It returns when a's context ends or the process exited.
func (t *Tracker) sample(ctx context.Context, a *tracked) {
	defer t.wg.Done()
	defer close(a.done)
	tick := time.NewTicker(t.cfg.Sample)
	defer tick.Stop()
	var (
		lines    []string
		lastEnd  int64     = -1
		cand     string    // the state the screen showed on the last samples
		count    int       // on how many consecutive samples
		first    time.Time // since when
		answered = map[string]time.Time{}
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now().UTC()
		if code, exited := a.s.Exited(); exited {
			t.exited(a, code, now)
			return
		}
		if end := a.s.OutputEnd(); end != lastEnd {
			scr, err := a.s.Screen()
			if err != nil {
				continue
			}
			lines, lastEnd = strings.Split(scr.Text, "\n"), end
		}
		m, ok := a.d.Rules.Evaluate(lines)
		state := ""
		if ok {
			state = m.Rule.State
		}
		if state != cand {
			cand, count, first = state, 0, now
		}
		count++
		t.mu.Lock()
		prev := a.m.State().State
		var changed bool
		if ok && count >= m.Rule.Hold {
			changed = a.m.Apply(api.AgentSignal{Source: api.SourceScreen, State: state, Evidence: m.Evidence(), Time: first}, now)
		} else {
			changed = a.m.Reconcile(now)
		}
		if changed {
			t.eventLocked(a, api.AgentEventState, prev)
		}
		cur, wasReady, prompt := a.m.State().State, a.wasReady, a.prompt
		if cur == api.AgentReady && prompt != "" {
			a.prompt = ""
			a.submitted = now // ready is not the prompt's turn (Wait)
			t.notifyLocked(a)
			if a.meta.Prompt == "" {
				a.meta.Prompt = bound(prompt, 1024)
			}
		} else {
			prompt = ""
		}
		t.mu.Unlock()
		if prompt != "" {
			at := time.Now().UTC()
			if err := a.s.Type(ctx, prompt, a.d.SubmitDelay, "Enter"); err != nil {
				t.log.Warn("agent's first prompt not typed", "agent", a.meta.ID, "err", err)
				continue
			}
			t.mu.Lock()
			t.submittedLocked(a, at)
			t.mu.Unlock()
			continue
		}
		if !wasReady {
			t.answer(ctx, a, lines, answered, now)
		}
	}
}

// answer types the keys of a first-run dialog's answer seen on the screen (at
// most once a second per answer).
func (t *Tracker) answer(ctx context.Context, a *tracked, lines []string, answered map[string]time.Time, now time.Time) {
	m, ok := a.d.Rules.answer(lines)
	if !ok || now.Sub(answered[m.Rule.Name]) < time.Second {
		return
	}
	answered[m.Rule.Name] = now
	t.log.Info("agent first-run dialog answered", "agent", a.meta.ID, "rule", m.Rule.Name)
	if err := a.s.Type(ctx, "", 0, m.Rule.Keys...); err != nil {
		t.log.Warn("agent first-run answer not typed", "agent", a.meta.ID, "err", err)
	}
}

// exited records the process's exit: exited, or error when it failed before it
// was ever ready.
func (t *Tracker) exited(a *tracked, code *int, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a.meta.ExitCode = code
	sig := api.AgentSignal{Source: api.SourceProcess, State: api.AgentExited, Evidence: "process exited", Time: now}
	if code != nil {
		sig.Evidence = "process exited with code " + strconv.Itoa(*code)
		if *code != 0 && !a.wasReady {
			sig.State = api.AgentError
			sig.Evidence += " before it was ready"
		}
	}
	prev := a.m.State().State
	if a.m.Apply(sig, now) {
		t.eventLocked(a, api.AgentEventState, prev)
	}
}

// idOrder orders session ids s1 < s2 < s10.
func idOrder(a, b string) int {
	na, ea := strconv.Atoi(strings.TrimPrefix(a, "s"))
	nb, eb := strconv.Atoi(strings.TrimPrefix(b, "s"))
	if ea == nil && eb == nil {
		return na - nb
	}
	return strings.Compare(a, b)
}
