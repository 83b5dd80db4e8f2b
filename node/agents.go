package node

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/agent"
	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/guard"
	"github.com/fleetmux/fleetmux/session"
)

// The agent verbs (DESIGN "Agents"): an agent is a session the node started for a
// driver (package agent) and tracks with its agent.Tracker (Node.Agents). Spawning
// is creating a session (decided by the guard as create is); send and interrupt
// type through the same writer lease and guard as input and keys; kill closes
// the session as close does, the agent's children on this node first.

// Agent session defaults: TUIs draw for a wider terminal than a shell's.
const (
	agentCols = 120
	agentRows = 40
)

// Agents is the node's agent tracker. Structured sources (the Claude Code hooks)
// report an agent's state to it with Tracker.Signal.
func (n *Node) Agents() *agent.Tracker { return n.agents }

// agentSession is an agent's entry as the tracker sees it (agent.Session).
type agentSession struct{ e *entry }

func (a agentSession) Screen() (api.Screen, error) { return a.e.s.Screen() }

func (a agentSession) OutputEnd() int64 {
	_, end := a.e.s.Offsets()
	return end
}

func (a agentSession) Exited() (*int, bool) {
	in := a.e.s.Info()
	return in.ExitCode, in.State == session.StateExited
}

// Type is the driver's own typing (the spawn's first prompt, first-run answers),
// which the spawn decided.
func (a agentSession) Type(ctx context.Context, text string, delay time.Duration, keys ...string) error {
	if text != "" {
		if err := a.e.s.Input([]byte(text)); err != nil {
			return err
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if err := pause(ctx, delay); err != nil {
		return err
	}
	return a.e.s.SendKeys(keys...)
}

// pause waits d or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// agentTarget decodes a request that names an agent into v (its Agent field) and
// finds its session and driver.
func (n *Node) agentTarget(req request, v any, id *string) (*entry, *agent.Driver, error) {
	if err := decode(req, v); err != nil {
		return nil, nil, err
	}
	e, err := n.lookup(*id)
	if err != nil {
		return nil, nil, err
	}
	d, ok := n.agents.Driver(e.id)
	if !ok {
		return nil, nil, api.Errorf(api.CodeNotFound, "session %s/%s is not an agent", n.cfg.Name, e.id)
	}
	return e, d, nil
}

func (n *Node) agentSpawn(ctx context.Context, req request) (any, error) {
	var r api.SpawnRequest
	if err := decode(req, &r); err != nil {
		return nil, err
	}
	d, err := agent.Lookup(r.Driver, r.Rules)
	if err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	if err := checkDriverKeys(d); err != nil {
		return nil, err
	}
	if r.Caps != nil && (r.Caps.MaxCostUSD < 0 || r.Caps.MaxTurns < 0) {
		return nil, api.Errorf(api.CodeBadRequest, "caps must not be negative")
	}
	if len(r.Prompt) > api.MaxPromptBytes {
		return nil, api.Errorf(api.CodeTooLarge, "prompt of %d bytes (limit %d)", len(r.Prompt), api.MaxPromptBytes)
	}
	if err := api.ValidText("prompt", r.Prompt, true); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	program := r.Program
	if program == "" {
		program = d.Program
	}
	if program == "" {
		return nil, api.Errorf(api.CodeBadRequest, "driver %s names no program: give one", d.Name)
	}
	path, err := exec.LookPath(program)
	if err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "driver %s: program %q not found on node %s (PATH, or give its path)", d.Name, program, n.cfg.Name)
	}
	w := writerOf(req)
	cr := api.CreateRequest{
		Title: "agent " + d.Name, Labels: r.Labels, Argv: append(append([]string{path}, d.Args...), r.Args...),
		Cwd: r.Cwd, Env: r.Env, Cols: r.Cols, Rows: r.Rows, Sandbox: r.Sandbox,
	}
	if cr.Cols <= 0 {
		cr.Cols = agentCols
	}
	if cr.Rows <= 0 {
		cr.Rows = agentRows
	}
	if err := validInfo(&cr.Title, nil, cr.Labels); err != nil {
		return nil, err
	}
	n.redactInfo(&cr.Title, nil, cr.Labels)

	// One spawn at a time: the tree's limits are checked and the agent added
	// under one lock, so that two spawns never both take the last place.
	n.spawnMu.Lock()
	defer n.spawnMu.Unlock()
	parent, depth, err := n.spawnParent(r, w)
	if err != nil {
		return nil, err
	}
	// Noted before the check: a spawn the policy holds becomes this agent when
	// a person approves it (creator.CreateApproved), not a bare session.
	hs := &heldSpawn{r: r, d: d, path: path}
	n.holdSpawn(&cr, hs)
	err = n.guard.Check(ctx, guard.Request{Verb: guard.VerbCreate, Writer: w, Create: &cr,
		Held: &guard.Held{Writer: w, Verb: guard.VerbCreate, Create: &cr}, Decision: req.decision})
	if !errors.Is(err, &api.Error{Code: api.CodeHeld}) {
		n.takeHeldSpawn(&cr)
	}
	if err != nil {
		return nil, err
	}
	return n.startAgent(ctx, hs, cr, w, parent, depth)
}

// heldSpawn is what an agent spawn needs beyond its session's create request.
type heldSpawn struct {
	r    api.SpawnRequest
	d    *agent.Driver
	path string // the program, found
}

// maxHeldSpawns bounds the held spawns the node remembers (those of approvals
// that expired or were denied are dropped, the oldest first, past it).
const maxHeldSpawns = 256

// holdSpawn remembers the spawn of create request cr until its approval is
// decided (or it is forgotten, past maxHeldSpawns).
func (n *Node) holdSpawn(cr *api.CreateRequest, hs *heldSpawn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.heldSpawns == nil {
		n.heldSpawns = map[*api.CreateRequest]*heldSpawn{}
	}
	n.heldSpawns[cr] = hs
	n.heldOrder = append(n.heldOrder, cr)
	for len(n.heldOrder) > maxHeldSpawns {
		delete(n.heldSpawns, n.heldOrder[0])
		n.heldOrder = n.heldOrder[1:]
	}
}

// takeHeldSpawn returns and forgets the spawn of create request cr, if any.
func (n *Node) takeHeldSpawn(cr *api.CreateRequest) (*heldSpawn, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	hs, ok := n.heldSpawns[cr]
	if ok {
		delete(n.heldSpawns, cr)
		if i := slices.Index(n.heldOrder, cr); i >= 0 {
			n.heldOrder = slices.Delete(n.heldOrder, i, i+1)
		}
	}
	return hs, ok
}

// spawnApproved starts the agent of an approved held spawn (the tree's limits
// checked again: they may have changed while it waited).
func (n *Node) spawnApproved(ctx context.Context, hs *heldSpawn, cr api.CreateRequest, w guard.Writer) (string, error) {
	n.spawnMu.Lock()
	defer n.spawnMu.Unlock()
	parent, depth, err := n.spawnParent(hs.r, w)
	if err != nil {
		return "", err
	}
	a, err := n.startAgent(ctx, hs, cr, w, parent, depth)
	if err != nil {
		return "", err
	}
	n.log.Info("held agent spawned", "agent", a.ID, "driver", a.Driver, "principal", w.Principal)
	return a.ID, nil
}

// startAgent starts the agent hs asks for (decided) in the session cr for w,
// under n.spawnMu: its secrets and hooks, its session, its tracking.
func (n *Node) startAgent(ctx context.Context, hs *heldSpawn, cr api.CreateRequest, w guard.Writer, parent string, depth int) (api.Agent, error) {
	r, d, path := hs.r, hs.d, hs.path
	// The secrets go into this agent's environment only: not into cr, which an
	// approval keeps; their values are redacted from its output like every
	// stored secret's.
	secrets, err := n.guard.AgentSecrets(ctx, w, d.Name, r.Secrets)
	if err != nil {
		return api.Agent{}, err
	}
	if len(secrets) > 0 {
		env := make(map[string]string, len(cr.Env)+len(secrets))
		for k, v := range cr.Env {
			env[k] = v
		}
		for k, v := range secrets {
			env[k] = v
		}
		cr.Env = env
	}
	hooks, err := n.prepareHooks(d, &cr) // agenthook.go
	if err != nil {
		return api.Agent{}, api.Errorf(api.CodeUnavailable, "node %s: the agent's hooks: %v", n.cfg.Name, err)
	}
	s, err := n.startSandboxed(cr, w, d.Name, hooks.dirs()...)
	clear(secrets)
	if err != nil {
		hooks.abort()
		return api.Agent{}, err
	}
	e, err := n.lookup(s.ID)
	if err != nil {
		hooks.abort()
		return api.Agent{}, err
	}
	meta := api.Agent{ID: s.ID, Driver: d.Name, Parent: parent, Depth: depth, Workdir: s.Cwd, Labels: r.Labels,
		Program: path, Owner: w.Principal, Caps: r.Caps, CreatedAt: s.CreatedAt}
	if err := n.agents.Add(meta, d, agentSession{e}, r.Prompt); err != nil {
		n.closeEntry(e, false)
		hooks.abort()
		return api.Agent{}, api.Errorf(api.CodeUnavailable, "node %s: %v", n.cfg.Name, err)
	}
	n.saveAgent(e, meta, r.Rules)
	n.startHooks(hooks, e, d.Name, w)
	a, _ := n.agents.Get(s.ID)
	return a, nil
}

// spawnParent is the parent and depth of a new agent: the agent r.Parent names
// ("NODE/ID"; one on this node must be one of its agents, and is counted here,
// one elsewhere the controller checked and r.Depth says), or w's principal for a
// root agent.
func (n *Node) spawnParent(r api.SpawnRequest, w guard.Writer) (string, int, error) {
	maxDepth, maxChildren := n.guard.Policy().AgentLimits()
	check := func(depth, children int) error { return api.CheckSpawnIn(depth, children, maxDepth, maxChildren) }
	if !strings.Contains(r.Parent, "/") {
		return w.Principal, 1, check(1, 0)
	}
	pnode, pid, err := api.ParseAddress(r.Parent)
	if err != nil {
		return "", 0, api.Errorf(api.CodeBadRequest, "parent: %v", err)
	}
	if pnode != n.cfg.Name {
		if r.Depth < 2 {
			return "", 0, api.Errorf(api.CodeBadRequest, "parent %s is on another node: the controller gives the depth", r.Parent)
		}
		return r.Parent, r.Depth, check(r.Depth, 0)
	}
	p, ok := n.agents.Get(pid)
	if !ok {
		return "", 0, api.Errorf(api.CodeNotFound, "no parent agent %s", r.Parent)
	}
	if api.AgentFinal(p.State) {
		return "", 0, api.Errorf(api.CodeExited, "parent agent %s has ended (%s)", r.Parent, p.State)
	}
	depth := max(p.Depth+1, r.Depth)
	return r.Parent, depth, check(depth, len(p.Children))
}

// checkDriverKeys checks that a driver's keys are keys the session knows (a
// generic driver's come from its rule file).
func checkDriverKeys(d *agent.Driver) error {
	keys := append(append([]string{}, d.Interrupt...), d.Clear...)
	for _, r := range d.Rules.Answers {
		keys = append(keys, r.Keys...)
	}
	if _, err := session.KeysBytes(keys); err != nil {
		return api.Errorf(api.CodeBadRequest, "driver %s: %v", d.Name, err)
	}
	return nil
}

func (n *Node) agentList(ctx context.Context, req request) (any, error) {
	return api.AgentList{Agents: n.agents.List()}, nil
}

func (n *Node) agentGet(ctx context.Context, req request) (any, error) {
	var r api.AgentRequest
	e, _, err := n.agentTarget(req, &r, &r.Agent)
	if err != nil {
		return nil, err
	}
	a, _ := n.agents.Get(e.id)
	return a, nil
}

// agentKill closes the agent's session, its children's on this node first (the
// controller ends those on other nodes). Its owner or an admin may.
func (n *Node) agentKill(ctx context.Context, req request) (any, error) {
	var r api.AgentRequest
	e, _, err := n.agentTarget(req, &r, &r.Agent)
	if err != nil {
		return nil, err
	}
	if err := guard.MayClose(e.owner, writerOf(req), n.cfg.Name, e.id); err != nil {
		return nil, err
	}
	a, _ := n.agents.Get(e.id)
	n.killTree(a.Address(), 0)
	n.agents.Remove(e.id)
	if _, ok := n.closeEntry(e, false); !ok {
		return nil, api.Errorf(api.CodeNotFound, "no agent %s/%s", n.cfg.Name, e.id)
	}
	a.State, a.StateSource, a.StateSince, a.Evidence = api.AgentExited, api.SourceProcess, time.Now().UTC(), "killed"
	return a, nil
}

// killTree closes the agents under addr on this node, the deepest first.
func (n *Node) killTree(addr string, level int) {
	if level > api.MaxSpawnDepthCap+1 {
		return
	}
	for _, id := range n.agents.Children(addr) {
		n.killTree(n.cfg.Name+"/"+id, level+1)
		n.agents.Remove(id)
		n.mu.Lock()
		e := n.sessions[id]
		n.mu.Unlock()
		if e != nil {
			n.closeEntry(e, false)
		}
	}
}

// agentSend types a prompt and submits it (the driver's Enter after its pause),
// after the driver's keys that empty the composer: text left there (a prompt
// the CLI put back when it was interrupted, a person's) is not sent with it.
func (n *Node) agentSend(ctx context.Context, req request) (any, error) {
	var r api.AgentSendRequest
	e, d, err := n.agentTarget(req, &r, &r.Agent)
	if err != nil {
		return nil, err
	}
	if len(r.Text) > api.MaxPromptBytes {
		return nil, api.Errorf(api.CodeTooLarge, "prompt of %d bytes (limit %d)", len(r.Text), api.MaxPromptBytes)
	}
	if strings.TrimSpace(r.Text) == "" {
		return nil, api.Errorf(api.CodeBadRequest, "empty prompt")
	}
	if err := api.ValidText("prompt", r.Text, true); err != nil {
		return nil, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	if len(d.Clear) > 0 {
		if err := n.typeKeys(ctx, e, req, d.Clear); err != nil {
			return nil, err
		}
		if err := pause(ctx, d.SubmitDelay); err != nil { // not read with the text as one paste
			return nil, sessionErr(e.id, err)
		}
	}
	if err := n.typeData(ctx, e, req, []byte(r.Text), false); err != nil {
		return nil, err
	}
	if err := pause(ctx, d.SubmitDelay); err != nil {
		return nil, sessionErr(e.id, err)
	}
	at := time.Now()
	if err := n.typeKeys(ctx, e, req, []string{"Enter"}); err != nil {
		return nil, err
	}
	// A wait for ready from now on waits for this prompt's turn.
	if err := n.agents.Submitted(e.id, at); err != nil && !errors.Is(err, agent.ErrNoAgent) {
		return nil, sessionErr(e.id, err)
	}
	a, _ := n.agents.Get(e.id)
	return a, nil
}

func (n *Node) agentInterrupt(ctx context.Context, req request) (any, error) {
	var r api.AgentRequest
	e, d, err := n.agentTarget(req, &r, &r.Agent)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	if err := n.typeKeys(ctx, e, req, d.Interrupt); err != nil {
		return nil, err
	}
	// The hooks' word from before is stale once the screen shows what came of
	// it: Claude Code fires no hook when interrupted.
	if err := n.agents.Interrupted(e.id, at); err != nil && !errors.Is(err, agent.ErrNoAgent) {
		return nil, sessionErr(e.id, err)
	}
	n.toolWaitsEnd(e.id, true) // agenthook.go: its permission requests are moot
	a, _ := n.agents.Get(e.id)
	return a, nil
}

// agentWaitDefault is what agent_wait waits for when no state is named.
var agentWaitDefault = []string{api.AgentReady, api.AgentDone, api.AgentError, api.AgentExited}

func (n *Node) agentWait(ctx context.Context, req request) (any, error) {
	var r api.AgentWaitRequest
	e, _, err := n.agentTarget(req, &r, &r.Agent)
	if err != nil {
		return nil, err
	}
	if r.TimeoutMS < 0 {
		return nil, api.Errorf(api.CodeBadRequest, "timeout_ms must not be negative")
	}
	states := r.States
	for _, s := range states {
		if !api.ValidAgentState(s) {
			return nil, api.Errorf(api.CodeBadRequest, "agent state %q: want one of %s", s, strings.Join(api.AgentStates, ", "))
		}
	}
	if len(states) == 0 {
		states = agentWaitDefault
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout(r.TimeoutMS))
	defer cancel()
	a, ok, err := n.agents.Wait(wctx, e.id, states)
	switch {
	case err == nil:
		return api.AgentWaitReply{Agent: a, OK: ok}, nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return api.AgentWaitReply{Agent: a, OK: false}, nil
	case errors.Is(err, agent.ErrNoAgent):
		return nil, api.Errorf(api.CodeNotFound, "no agent %s/%s", n.cfg.Name, e.id)
	}
	return nil, sessionErr(e.id, err)
}

// agentOutputMax bounds the text of one agent_output reply, agentOutputRead the
// raw output it reads for it.
const (
	agentOutputMax  = 64 << 10
	agentOutputRead = 4 << 20
)

// agentOutput is the agent's output since a cursor as lines (agent.Text), and its
// screen now. A cursor older than the scrollback starts at its oldest byte.
func (n *Node) agentOutput(ctx context.Context, req request) (any, error) {
	var r api.AgentOutputRequest
	e, _, err := n.agentTarget(req, &r, &r.Agent)
	if err != nil {
		return nil, err
	}
	if r.Cursor < 0 || r.MaxBytes < 0 {
		return nil, api.Errorf(api.CodeBadRequest, "cursor and max_bytes must not be negative")
	}
	budget := r.MaxBytes
	if budget == 0 || budget > agentOutputMax {
		budget = agentOutputMax
	}
	oldest, end := e.s.Offsets()
	from := max(r.Cursor, oldest)
	var skipped int64
	if r.Cursor < oldest {
		skipped = oldest - r.Cursor
	}
	if end-from > agentOutputRead { // bounded work: the older rest is skipped
		skipped += end - agentOutputRead - from
		from = end - agentOutputRead
	}
	var raw []byte
	for from < end {
		chunk, err := e.s.Read(from, api.MaxReadBytes)
		if err != nil || len(chunk) == 0 {
			break
		}
		raw = append(raw, chunk...)
		from += int64(len(chunk))
	}
	text, omitted := agent.Text(raw, budget)
	out := api.AgentOutput{Text: text, Cursor: from, Omitted: omitted + skipped}
	if scr, err := e.s.Screen(); err == nil {
		out.Screen = scr.Text
	}
	out.Agent, _ = n.agents.Get(e.id)
	out.Turns = n.agents.Turns(e.id)
	return out, nil
}

// spawnDetail is an agent_spawn's audit detail: the driver, program, parent and
// the names (never the values) of its environment and secrets; red redacts.
func spawnDetail(data []byte, red func(string) string) string {
	var r api.SpawnRequest
	if json.Unmarshal(data, &r) != nil {
		return ""
	}
	d := "driver " + r.Driver
	if r.Program != "" {
		d += " program " + red(r.Program)
	}
	if r.Parent != "" {
		d += " parent " + r.Parent
	}
	for _, m := range []struct {
		what string
		kv   map[string]string
	}{{"env", r.Env}, {"secrets", r.Secrets}} {
		if len(m.kv) == 0 {
			continue
		}
		keys := make([]string, 0, len(m.kv))
		for k := range m.kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d += " " + m.what + " " + strings.Join(keys, ",")
	}
	if r.Prompt != "" {
		d += " prompt of " + strconv.Itoa(len(r.Prompt)) + " bytes"
	}
	return d
}
