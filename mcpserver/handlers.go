package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tools' handlers (the tools, their input types and schemas are in tools.go;
// how results read, in format.go).

func (m *Server) listNodes(ctx context.Context, _ listNodesIn) (*mcp.CallToolResult, Nodes, error) {
	list, err := m.f.Nodes(ctx)
	if err != nil {
		return nil, Nodes{}, m.explain(err, "", "")
	}
	nodes := slices.Clone(list.Nodes)
	slices.SortFunc(nodes, func(a, b api.Node) int { return strings.Compare(a.Name, b.Name) })
	out := Nodes{Nodes: []Node{}}
	counts := map[string]int{}
	var lines []string
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, Node{Name: n.Name, Status: n.Status, Sessions: n.Sessions, Labels: n.Labels, Version: n.Version})
		counts[n.Status]++
		l := fmt.Sprintf("%s · %s · %s", n.Name, n.Status, count(n.Sessions, "session"))
		if len(n.Labels) > 0 {
			l += " · labels " + labelList(n.Labels)
		}
		if n.Version != "" {
			l += " · v" + strings.TrimPrefix(n.Version, "v")
		}
		lines = append(lines, l)
	}
	if len(nodes) == 0 {
		return textResult("no nodes: no node agent has joined the fleet (start one with `fleetmux node`, or run `fleetmux dev`)"), out, nil
	}
	var st []string
	for _, s := range []string{api.NodeAlive, api.NodeSuspect, api.NodeDisconnected, api.NodeDead, api.NodeLeft} {
		if counts[s] > 0 {
			st = append(st, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	text := fmt.Sprintf("%s (%s)\n%s", count(len(nodes), "node"), strings.Join(st, ", "), strings.Join(lines, "\n"))
	return textResult(text), out, nil
}

func (m *Server) listSessions(ctx context.Context, in listSessionsIn) (*mcp.CallToolResult, Sessions, error) {
	if in.Node != "" && api.ValidName(in.Node) != nil {
		return nil, Sessions{}, toolErrf("bad node %q: names are 1-63 of A-Z a-z 0-9 _ - (call list_nodes)", in.Node)
	}
	list, err := m.f.Sessions(ctx, api.SessionFilter{Node: in.Node, Labels: in.Labels})
	if err != nil {
		return nil, Sessions{}, m.explain(err, in.Node, "")
	}
	out := Sessions{Sessions: []Session{}, Unavailable: list.Unavailable}
	var b strings.Builder
	nodes := map[string]bool{}
	for _, s := range list.Sessions {
		nodes[s.Node] = true
	}
	switch {
	case len(list.Sessions) == 0 && (in.Node != "" || len(in.Labels) > 0):
		b.WriteString("no sessions match: call list_sessions without filters, or create_session")
	case len(list.Sessions) == 0:
		b.WriteString("no sessions: call create_session to start one")
	default:
		fmt.Fprintf(&b, "%s on %s", count(len(list.Sessions), "session"), count(len(nodes), "node"))
	}
	for _, s := range list.Sessions {
		out.Sessions = append(out.Sessions, sessionOut(s))
		b.WriteString("\n" + sessionLine(s))
	}
	if len(list.Unavailable) > 0 {
		fmt.Fprintf(&b, "\n(no answer from %s: their sessions are missing; list_nodes shows their status)", strings.Join(list.Unavailable, ", "))
	}
	return textResult(b.String()), out, nil
}

func (m *Server) createSession(ctx context.Context, in createSessionIn) (*mcp.CallToolResult, Session, error) {
	if in.Node != "" && api.ValidName(in.Node) != nil {
		return nil, Session{}, toolErrf("bad node %q: names are 1-63 of A-Z a-z 0-9 _ - (call list_nodes)", in.Node)
	}
	s, err := m.f.NewSession(ctx, api.NewSession{Node: in.Node, CreateRequest: api.CreateRequest{
		Title: in.Title, Description: in.Description, Labels: in.Labels, Shell: in.Shell, Cwd: in.Cwd,
	}})
	if err != nil {
		return nil, Session{}, m.explain(err, in.Node, "")
	}
	// Wait for the prompt, so the first run_command does not wait for it.
	if s.State != api.StateIdle {
		if wr, err := m.f.Wait(ctx, s.Node, s.ID, api.WaitQuery{Until: api.UntilIdle, TimeoutMS: createWaitMS}); err == nil {
			s = wr.Session
		}
	}
	text := "created " + sessionLine(s)
	if s.Shell != "" {
		text += " · shell " + s.Shell
	}
	text += "\nRun commands in it with run_command " + jsonArgs("node", s.Node, "session", s.ID, "command", "...") + "."
	return textResult(text), sessionOut(s), nil
}

// inputSettle is how long a session must wait for input, with no output, before
// untilInput believes it: the kernel is sampled, and right after a command is typed
// the session can still show the shell as it was at its prompt, reading the
// terminal, until the command's start mark (output) or the next sample.
const inputSettle = 250 * time.Millisecond

// untilInput runs op and, while it runs, waits for the session to wait for input.
// When the session waits for input first (and keeps waiting for inputSettle), op is
// cancelled (the command goes on) and the wait's result returned; otherwise op's
// error is.
func (m *Server) untilInput(ctx context.Context, node, id string, timeoutMS int, op func(context.Context) error) (*api.WaitResult, error) {
	opCtx, cancelOp := context.WithCancel(ctx)
	defer cancelOp()
	wCtx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	opDone := make(chan error, 1)
	go func() { opDone <- op(opCtx) }() // owned by this call: joined below
	waitDone := make(chan *api.WaitResult, 1)
	go func() { // owned by this call: joined below
		waitDone <- m.settledInput(wCtx, node, id, time.Now().Add(time.Duration(timeoutMS)*time.Millisecond))
	}()
	select {
	case err := <-opDone:
		cancelWait()
		<-waitDone
		return nil, err
	case wr := <-waitDone:
		if wr == nil {
			return nil, <-opDone
		}
		cancelOp()
		err := <-opDone
		if err == nil || ctx.Err() != nil {
			return nil, err // op finished after all (its result wins), or we were cancelled
		}
		return wr, nil
	}
}

// settledInput waits until the session waits for input and then prints nothing for
// inputSettle; nil when the deadline or ctx comes first, or on errors.
func (m *Server) settledInput(ctx context.Context, node, id string, deadline time.Time) *api.WaitResult {
	ms := func(d time.Duration) int { return max(int(d/time.Millisecond), 1) }
	for first := true; ; first = false {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		if !first {
			// Output came while it waited for input (a background job writing to the
			// terminal, say): look again a little later, not in a tight loop.
			t := time.NewTimer(min(inputSettle/5, left))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil
			}
		}
		wr, err := m.f.Wait(ctx, node, id, api.WaitQuery{Until: api.UntilWaitingInput, TimeoutMS: ms(left)})
		if err != nil || !wr.OK || wr.Session.State != api.StateWaitingInput {
			return nil
		}
		// A program blocked reading the terminal prints nothing more; a command
		// that was only being typed prints its start mark.
		ow, err := m.f.Wait(ctx, node, id, api.WaitQuery{Until: api.UntilOutput, After: wr.Session.OutputOffset, TimeoutMS: ms(min(inputSettle, time.Until(deadline)))})
		if err != nil {
			return nil
		}
		if !ow.OK && ow.Session.State == api.StateWaitingInput {
			wr.Session = ow.Session
			return &wr
		}
	}
}

// fill sets v's block from a wait's result, read again within v's budget when its
// text is over it, and the screen when the session waits for input.
func (m *Server) fill(ctx context.Context, v *blockView, wr api.WaitResult) error {
	v.br = wr.BlockResult
	v.hasBlock = wr.Session.Blocks > 0
	if v.hasBlock && (len(wr.Text) > v.budget || v.state() == api.StateWaitingInput || wr.Block.N != wr.Session.Blocks) {
		br, err := m.f.Block(ctx, v.node, v.id, wr.Session.Blocks, api.BlockQuery{MaxBytes: v.budget})
		if err != nil {
			return err
		}
		v.br.Block, v.br.Text, v.br.OmittedBytes, v.br.LostBytes = br.Block, br.Text, br.OmittedBytes, br.LostBytes
	}
	m.fillScreen(ctx, v)
	return nil
}

// fullScreenMessage is in the busy error of a run refused because a full-screen
// program is in front (session.FullScreenError).
const fullScreenMessage = "is running full-screen"

// fullScreenRefusal is run_command's error when a full-screen program is in
// front: which program, how to drive it, and its screen (within budget).
func (m *Server) fullScreenRefusal(ctx context.Context, node, id string, budget int) error {
	sc, err := m.f.Screen(ctx, node, id)
	if err != nil {
		sc = api.Screen{}
	}
	prog := programName(sc.Program)
	var b strings.Builder
	fmt.Fprintf(&b, "%s is running full-screen in %s and reads keys, not command lines: nothing was typed. %s, then read_screen %s to see it; "+
		"or call run_command with type_anyway: true to type the line into it as keystrokes.",
		prog, addr(node, id), keysHint(sc.Program, node, id), jsonArgs("node", node, "session", id))
	if t := screenBody(sc, budget); t != "" {
		b.WriteString("\nscreen:\n" + fence("screen", t))
	}
	return &toolError{msg: b.String(), code: api.CodeBusy}
}

// fillScreen reads the screen of a session that waits for input (its prompt)
// or runs a command (a full-screen program shows there).
func (m *Server) fillScreen(ctx context.Context, v *blockView) {
	if st := v.state(); st != api.StateWaitingInput && st != api.BlockRunning {
		return
	}
	if sc, err := m.f.Screen(ctx, v.node, v.id); err == nil {
		v.screen = &sc
	}
}

func (m *Server) runCommand(ctx context.Context, in runCommandIn) (*mcp.CallToolResult, Block, error) {
	if err := checkSession(in.Node, in.Session); err != nil {
		return nil, Block{}, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return nil, Block{}, toolErrf("command is empty: give the command line to run (to press Enter or answer a prompt, use send_input)")
	}
	timeout, err := checkTimeout(in.TimeoutMS)
	if err != nil {
		return nil, Block{}, err
	}
	if in.MaxOutputBytes < 0 {
		return nil, Block{}, toolErrf("max_output_bytes must not be negative")
	}
	v := blockView{node: in.Node, id: in.Session, budget: m.budget(in.MaxOutputBytes)}
	s, err := m.f.Session(ctx, in.Node, in.Session)
	if err != nil {
		return nil, Block{}, m.explain(err, in.Node, in.Session)
	}
	if s.State == api.StateExited {
		return nil, Block{}, m.explain(api.Errorf(api.CodeExited, "it exited"), in.Node, in.Session)
	}
	var br api.BlockResult
	run := func(ctx context.Context) (err error) {
		br, err = m.f.Run(ctx, in.Node, in.Session, api.RunBody{Command: in.Command, TimeoutMS: timeout, MaxOutputBytes: v.budget, TypeAnyway: in.TypeAnyway})
		return err
	}
	var input *api.WaitResult
	if s.State == api.StateIdle {
		// A command that stops to read the terminal (read, a prompt, a pager) is
		// reported at once rather than at the timeout.
		input, err = m.untilInput(ctx, in.Node, in.Session, timeout, run)
	} else {
		err = run(ctx) // a program waiting for input (typed into), or busy
	}
	if ae, held := heldError(err); held {
		res, out := heldResult(in.Node, in.Session, in.Command, ae)
		return res, out, nil
	}
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeBusy && strings.Contains(ae.Message, fullScreenMessage) {
			return nil, Block{}, m.fullScreenRefusal(ctx, in.Node, in.Session, v.budget)
		}
		return nil, Block{}, m.explain(err, in.Node, in.Session)
	}
	if input != nil {
		if err := m.fill(ctx, &v, *input); err != nil {
			return nil, Block{}, m.explain(err, in.Node, in.Session)
		}
	} else {
		v.br, v.hasBlock = br, true
		m.fillScreen(ctx, &v)
	}
	v.now = time.Now()
	return textResult(v.text()), v.out(), nil
}

func (m *Server) waitFor(ctx context.Context, in waitForIn) (*mcp.CallToolResult, Block, error) {
	if err := checkSession(in.Node, in.Session); err != nil {
		return nil, Block{}, err
	}
	until := in.Until
	if until == "" {
		until = api.UntilIdle
	}
	timeout, err := checkTimeout(in.TimeoutMS)
	if err != nil {
		return nil, Block{}, err
	}
	if in.MaxOutputBytes < 0 || in.After < 0 {
		return nil, Block{}, toolErrf("max_output_bytes and after must not be negative")
	}
	if in.Approval != "" {
		return m.waitApproval(ctx, in, timeout)
	}
	v := blockView{node: in.Node, id: in.Session, budget: m.budget(in.MaxOutputBytes)}
	s, err := m.f.Session(ctx, in.Node, in.Session)
	if err != nil {
		return nil, Block{}, m.explain(err, in.Node, in.Session)
	}
	after := in.After
	if until == api.UntilOutput && after == 0 {
		after = s.OutputOffset
	}
	var wr api.WaitResult
	wait := func(ctx context.Context) (err error) {
		wr, err = m.f.Wait(ctx, in.Node, in.Session, api.WaitQuery{Until: until, After: after, TimeoutMS: timeout})
		return err
	}
	var input *api.WaitResult
	if until == api.UntilIdle && (s.State == api.StateRunning || s.State == api.StateWaitingInput) {
		// Also when it waits for input now: after send_input the program may ask
		// again (a second prompt), or the state may not have caught up yet (the
		// typed text's echo shows that, and settledInput waits it out).
		input, err = m.untilInput(ctx, in.Node, in.Session, timeout, wait)
	} else {
		err = wait(ctx)
	}
	if err != nil {
		return nil, Block{}, m.explain(err, in.Node, in.Session)
	}
	ok := wr.OK
	if input != nil {
		wr, ok = *input, false
	}
	if err := m.fill(ctx, &v, wr); err != nil {
		return nil, Block{}, m.explain(err, in.Node, in.Session)
	}
	v.now = time.Now()
	out := v.out()
	out.OK = &ok
	text := v.text()
	if !ok {
		why := fmt.Sprintf("wait_for %s timed out after %s", until, fmtDuration(time.Duration(timeout)*time.Millisecond))
		if input != nil {
			why = "wait_for " + until + " returned early: the command is waiting for input"
		}
		text += "\n(" + why + ")"
	}
	return textResult(text), out, nil
}

func (m *Server) sendInput(ctx context.Context, in sendInputIn) (*mcp.CallToolResult, Sent, error) {
	if err := checkSession(in.Node, in.Session); err != nil {
		return nil, Sent{}, err
	}
	if in.Text == "" && !in.Enter {
		return nil, Sent{}, toolErrf("nothing to send: give text, or enter: true to press Enter")
	}
	data := in.Text
	if in.Enter {
		data += "\r"
	}
	if err := m.f.Input(ctx, in.Node, in.Session, data); err != nil {
		return nil, Sent{}, m.explain(err, in.Node, in.Session)
	}
	what := fmt.Sprintf("typed %d bytes into %s", len(in.Text), addr(in.Node, in.Session))
	if in.Enter {
		what += " and pressed Enter"
	}
	text := what + ". Call wait_for " + jsonArgs("node", in.Node, "session", in.Session) + " to see what it does, or read_screen."
	return textResult(text), Sent{Node: in.Node, Session: in.Session, Bytes: len(data)}, nil
}

func (m *Server) sendKeys(ctx context.Context, in sendKeysIn) (*mcp.CallToolResult, Sent, error) {
	if err := checkSession(in.Node, in.Session); err != nil {
		return nil, Sent{}, err
	}
	if len(in.Keys) == 0 {
		return nil, Sent{}, toolErrf("keys is empty: give key names, e.g. [\"C-c\"] or [\"q\"]")
	}
	if err := m.f.Keys(ctx, in.Node, in.Session, in.Keys...); err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeBadRequest {
			return nil, Sent{}, toolErrf("bad keys: %s", ae.Message)
		}
		return nil, Sent{}, m.explain(err, in.Node, in.Session)
	}
	text := fmt.Sprintf("sent %s to %s. Call wait_for %s or read_screen to see the effect.",
		strings.Join(in.Keys, " "), addr(in.Node, in.Session), jsonArgs("node", in.Node, "session", in.Session))
	return textResult(text), Sent{Node: in.Node, Session: in.Session, Keys: len(in.Keys)}, nil
}

func (m *Server) readScreen(ctx context.Context, in readScreenIn) (*mcp.CallToolResult, Screen, error) {
	if err := checkSession(in.Node, in.Session); err != nil {
		return nil, Screen{}, err
	}
	if in.Lines < 0 {
		return nil, Screen{}, toolErrf("lines must not be negative")
	}
	sc, err := m.f.Screen(ctx, in.Node, in.Session)
	if err != nil {
		return nil, Screen{}, m.explain(err, in.Node, in.Session)
	}
	v := screenView{node: in.Node, id: in.Session, sc: sc, lines: in.Lines, budget: m.maxText}
	return textResult(v.text()), v.out(), nil
}

func (m *Server) readBlock(ctx context.Context, in readBlockIn) (*mcp.CallToolResult, Block, error) {
	if err := checkSession(in.Node, in.Session); err != nil {
		return nil, Block{}, err
	}
	if in.N < 0 || in.Offset < 0 || in.Limit < 0 || in.MaxBytes < 0 {
		return nil, Block{}, toolErrf("n, offset, limit and max_bytes must not be negative")
	}
	n := in.N
	if n == 0 {
		s, err := m.f.Session(ctx, in.Node, in.Session)
		if err != nil {
			return nil, Block{}, m.explain(err, in.Node, in.Session)
		}
		if s.Blocks == 0 {
			return nil, Block{}, toolErrf("%s has run no command yet: call run_command first", addr(in.Node, in.Session))
		}
		n = s.Blocks
	}
	v := blockView{node: in.Node, id: in.Session, budget: m.budget(in.MaxBytes), hasBlock: true}
	br, err := m.f.Block(ctx, in.Node, in.Session, n, api.BlockQuery{Offset: in.Offset, Limit: in.Limit, Grep: in.Grep, MaxBytes: v.budget})
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeNotFound && !strings.HasPrefix(ae.Message, "unknown node") && !strings.HasPrefix(ae.Message, "no session") {
			return nil, Block{}, toolErrf("%s has no block %d: call read_block without n for the last one, or list_sessions to see how many blocks it has", addr(in.Node, in.Session), n)
		}
		if errors.As(err, &ae) && ae.Code == api.CodeBadRequest && in.Grep != "" {
			return nil, Block{}, toolErrf("bad grep %q: %s (grep is an RE2 regular expression)", in.Grep, ae.Message)
		}
		return nil, Block{}, m.explain(err, in.Node, in.Session)
	}
	v.br = br
	var q []string
	if in.Grep != "" {
		q = append(q, fmt.Sprintf("lines matching %q (line numbers first)", in.Grep))
	}
	if in.Offset > 0 || in.Limit > 0 {
		l := fmt.Sprintf("from line %d", in.Offset+1)
		if in.Limit > 0 {
			l = fmt.Sprintf("lines %d-%d", in.Offset+1, in.Offset+in.Limit)
		}
		q = append(q, l)
	}
	if len(q) > 0 {
		v.query = "(" + strings.Join(q, ", ") + ")"
		if br.Text == "" {
			v.br.Text = "(no lines)"
		}
	}
	v.now = time.Now()
	return textResult(v.text()), v.out(), nil
}

func (m *Server) setSessionInfo(ctx context.Context, in setSessionInfoIn) (*mcp.CallToolResult, Session, error) {
	if err := checkSession(in.Node, in.Session); err != nil {
		return nil, Session{}, err
	}
	if in.Title == nil && in.Description == nil && len(in.Labels) == 0 {
		return nil, Session{}, toolErrf("nothing to change: give title, description or labels")
	}
	s, err := m.f.UpdateSession(ctx, in.Node, in.Session, api.SessionPatch{Title: in.Title, Description: in.Description, Labels: in.Labels})
	if err != nil {
		return nil, Session{}, m.explain(err, in.Node, in.Session)
	}
	return textResult("updated " + sessionLine(s)), sessionOut(s), nil
}

func (m *Server) closeSession(ctx context.Context, in closeSessionIn) (*mcp.CallToolResult, Session, error) {
	if err := checkSession(in.Node, in.Session); err != nil {
		return nil, Session{}, err
	}
	s, err := m.f.CloseSession(ctx, in.Node, in.Session)
	if err != nil {
		return nil, Session{}, m.explain(err, in.Node, in.Session)
	}
	text := fmt.Sprintf("closed %s (%s run", addr(in.Node, in.Session), count(s.Blocks, "command"))
	if s.LastExitCode != nil {
		text += fmt.Sprintf(", the last exited %d", *s.LastExitCode)
	}
	return textResult(text + ")"), sessionOut(s), nil
}

func (m *Server) fanoutRun(ctx context.Context, in fanoutRunIn) (*mcp.CallToolResult, Fanout, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, Fanout{}, toolErrf("command is empty: give the command line to run on every target")
	}
	if !in.All && len(in.Nodes) == 0 && len(in.Labels) == 0 && len(in.Sessions) == 0 {
		return nil, Fanout{}, toolErrf("no targets: set all: true, nodes, labels or sessions (call list_nodes to see the nodes)")
	}
	if len(in.Sessions) > 0 && (in.All || len(in.Nodes) > 0 || len(in.Labels) > 0) {
		return nil, Fanout{}, toolErrf("sessions excludes all, nodes and labels: give one kind of target")
	}
	for _, n := range in.Nodes {
		if api.ValidName(n) != nil {
			return nil, Fanout{}, toolErrf("bad node %q in nodes: names are 1-63 of A-Z a-z 0-9 _ - (call list_nodes)", n)
		}
	}
	for _, a := range in.Sessions {
		if _, _, err := api.ParseAddress(a); err != nil {
			return nil, Fanout{}, toolErrf("bad session address %q in sessions: want NODE/SESSION, e.g. web-1/s3 (call list_sessions)", a)
		}
	}
	timeout, err := checkTimeout(in.TimeoutMS)
	if err != nil {
		return nil, Fanout{}, err
	}
	if in.Batch < 0 || in.MaxOutputBytes < 0 {
		return nil, Fanout{}, toolErrf("batch and max_output_bytes must not be negative")
	}
	// Without details only the first line is shown: ask for little. With details
	// the budget is shared by the targets (max_output_bytes is per target).
	budget := 512
	if in.Details {
		budget = in.MaxOutputBytes
		if budget == 0 {
			budget = max(m.maxText/m.fanoutTargets(ctx, in), 256)
		}
		budget = min(budget, maxTextBytes/max(len(in.Nodes), len(in.Sessions), 1))
	}
	fo, err := m.f.Fanout(ctx, api.FanoutRequest{
		Selector: api.Selector{All: in.All, Nodes: in.Nodes, Labels: in.Labels, Sessions: in.Sessions},
		Command:  in.Command, Session: in.SessionTitle, TimeoutMS: timeout, MaxOutputBytes: budget,
		Batch: in.Batch, StopOnFailure: in.StopOnFailure,
	})
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
			return nil, Fanout{}, toolErrf("no target: %s: call list_nodes to see the nodes and their labels", ae.Message)
		}
		return nil, Fanout{}, m.explain(err, "", "")
	}
	out := Fanout{Command: in.Command, OK: fo.OK, Failed: fo.Failed, Results: []FanoutTarget{}}
	var b strings.Builder
	fmt.Fprintf(&b, "fanout_run on %s: ok=%d failed=%d · $ %s", count(len(fo.Results), "target"), fo.OK, fo.Failed, api.OneLine(in.Command, 120))
	for _, r := range fo.Results {
		t := FanoutTarget{Node: r.Node, Session: r.Session, ExitCode: r.ExitCode, DurationMS: r.DurationMS, OmittedBytes: r.OmittedBytes, Result: "ok"}
		if r.Error != nil {
			t.Result, t.Error, t.Approval = r.Error.Code, r.Error.Message, r.Error.Approval
		}
		out.Results = append(out.Results, t)
		where := r.Node
		if r.Session != "" {
			where = addr(r.Node, r.Session)
		}
		var what string
		switch {
		case r.Error == nil && r.ExitCode != nil:
			what = fmt.Sprintf("exit %d", *r.ExitCode)
		case r.Error == nil:
			what = api.BlockDone
		case r.Error.Code == api.CodeExitStatus && r.ExitCode != nil:
			what = fmt.Sprintf("exit %d", *r.ExitCode)
		case r.Error.Code == api.CodeExitUnknown:
			what = r.Error.Message
		case r.Error.Code == api.CodeSkipped:
			what = "skipped (" + r.Error.Message + ")"
		case r.Error.Code == api.CodeHeld:
			what = fmt.Sprintf("held for approval %s by rule %q: nothing ran yet; call wait_for %s for its result once a person decides",
				r.Error.Approval, r.Error.Rule, jsonArgs("node", r.Node, "session", r.Session, "approval", r.Error.Approval))
		default:
			what = r.Error.Code + ": " + r.Error.Message
		}
		line := fmt.Sprintf("%s · %s · %s", where, what, fmtDuration(time.Duration(r.DurationMS)*time.Millisecond))
		if first, _ := api.FirstLine(r.Text); first != "" && (r.Error == nil || r.Error.Code == api.CodeExitStatus || r.Error.Code == api.CodeExitUnknown || r.Error.Code == api.CodeTimeout) {
			line += " · first line of output " + strconv.Quote(api.Clip(first, 100))
		}
		b.WriteString("\n" + line)
	}
	unknown := 0
	for _, r := range fo.Results {
		if r.Error != nil && r.Error.Code == api.CodeNotFound {
			unknown++
		}
	}
	if unknown > 0 {
		b.WriteString("\n(some targets were not found: call list_nodes or list_sessions)")
	}
	if in.Details {
		for _, r := range fo.Results {
			if r.Block == nil {
				continue
			}
			where := addr(r.Node, r.Session)
			fmt.Fprintf(&b, "\n--- %s ---\n", where)
			if r.Text == "" {
				b.WriteString("(no output)")
			} else {
				b.WriteString(fence("output", r.Text))
			}
			if r.OmittedBytes > 0 {
				fmt.Fprintf(&b, "\n[%d bytes omitted from the middle]", r.OmittedBytes)
			}
		}
	} else if fo.Failed > 0 || len(fo.Results) > 0 {
		b.WriteString("\n(call fanout_run with details: true for each target's output; sessions named by session_title are kept and readable with read_block)")
	}
	return textResult(b.String()), out, nil
}

// fanoutTargets estimates how many targets a fan-out has: the nodes or sessions
// named, or the alive nodes that all or labels select (at least 1).
func (m *Server) fanoutTargets(ctx context.Context, in fanoutRunIn) int {
	if n := max(len(in.Nodes), len(in.Sessions)); n > 0 {
		return n
	}
	list, err := m.f.Nodes(ctx)
	if err != nil {
		return 1
	}
	n := 0
	for _, nd := range list.Nodes {
		if nd.Status == api.NodeAlive && (in.All || hasLabels(nd.Labels, in.Labels)) {
			n++
		}
	}
	return max(n, 1)
}

// hasLabels says whether have carries every label of want.
func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}
