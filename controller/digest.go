package controller

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/digest"
)

// Digest (DESIGN "Digest"): the controller gathers a snapshot from the nodes
// (sessions with their blocks, approvals, agents, and the output of the newest
// failures) and package digest makes the text. A node that does not answer is
// named in the digest, never waited for past the request timeout.

// digestFailureTexts is how many of the newest failures get their output read.
const digestFailureTexts = 20

// errSessionScope makes a session's digest ask for that session's blocks alone.
var errSessionScope = errors.New("session scope")

// digestConcurrency bounds the node requests a digest has in flight.
const digestConcurrency = 16

// Digest is what happened in q's scope since q.Since, within q.BudgetTokens.
func (c *Controller) Digest(ctx context.Context, q api.DigestQuery) (api.Digest, error) {
	since, err := api.ParseDigestCursor(q.Since)
	if err != nil {
		return api.Digest{}, err
	}
	if q.BudgetTokens < 0 {
		return api.Digest{}, api.Errorf(api.CodeBadRequest, "budget_tokens must not be negative")
	}
	if q.BudgetTokens == 0 {
		q.BudgetTokens = api.DefaultDigestTokens
	}
	if q.Scope == "" {
		q.Scope = api.ScopeFleet
	}
	snap := digest.Snapshot{Scope: q.Scope, Since: since, At: time.Now().UTC(), Texts: map[string]string{}}
	node, session := "", ""
	switch q.Scope {
	case api.ScopeFleet:
	case api.ScopeNode:
		if err := api.ValidName(q.Node); err != nil {
			return api.Digest{}, api.Errorf(api.CodeBadRequest, "scope node needs node: %v", err)
		}
		node = q.Node
		snap.Scope += " " + node
	case api.ScopeSession:
		var err error
		if node, session, err = api.ParseAddress(q.Session); err != nil {
			return api.Digest{}, api.Errorf(api.CodeBadRequest, "scope session needs session NODE/ID: %v", err)
		}
		snap.Scope += " " + q.Session
	default:
		return api.Digest{}, api.Errorf(api.CodeBadRequest, "scope %q: want fleet, node or session", api.OneLine(q.Scope, 32))
	}

	var list api.SessionList
	if session != "" {
		s, err := c.Session(ctx, node, session)
		if err != nil {
			return api.Digest{}, err
		}
		list.Sessions = []api.Session{s}
	} else if list, err = c.Sessions(ctx, api.SessionFilter{Node: node}); err != nil {
		return api.Digest{}, err
	}
	snap.Unavailable = list.Unavailable
	approvals, err := c.Approvals(ctx, node, "")
	if err != nil && node != "" {
		return api.Digest{}, err
	}
	agents, err := c.Agents(ctx, node)
	if err != nil && node != "" {
		return api.Digest{}, err
	}
	for _, a := range approvals.Approvals {
		if session == "" || a.Session == session {
			snap.Approvals = append(snap.Approvals, a)
		}
	}
	for _, a := range agents.Agents {
		if session == "" || a.ID == session {
			snap.Agents = append(snap.Agents, a)
		}
	}

	// The blocks in the window and those running: one request per node
	// (digest_blocks), in parallel; per session from a node that does not know
	// that verb (an older agent) and for a session's scope.
	snap.Sessions = make([]digest.Session, len(list.Sessions))
	byNode := map[string][]int{}
	for i, s := range list.Sessions {
		snap.Sessions[i].Session = s
		byNode[s.Node] = append(byNode[s.Node], i)
	}
	sem := make(chan struct{}, digestConcurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	unavailable := func(i int) {
		mu.Lock()
		snap.Unavailable = append(snap.Unavailable, snap.Sessions[i].Node+"/"+snap.Sessions[i].ID)
		mu.Unlock()
	}
	perSession := func(i int) {
		s := snap.Sessions[i]
		bl, err := c.Blocks(ctx, s.Node, s.ID)
		if err != nil {
			unavailable(i)
			return
		}
		kept := bl.Blocks[:0]
		for _, b := range bl.Blocks {
			if b.State == api.BlockRunning || b.FinishedAt != nil && snap.In(*b.FinishedAt) {
				kept = append(kept, b)
			}
		}
		snap.Sessions[i].Blocks = kept
	}
	for node, idx := range byNode {
		wg.Add(1)
		go func() { // owned by this call: joined below
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var db api.DigestBlocks
			err := errSessionScope
			if session == "" {
				err = c.call(ctx, principalOf(ctx), node, api.VerbDigestBlocks, api.DigestBlocksRequest{Since: since}, &db, c.cfg.RequestTimeout)
			}
			if err != nil { // an older agent has no such verb: ask per session
				for _, i := range idx {
					perSession(i)
				}
				return
			}
			for _, i := range idx {
				for _, b := range db.Sessions[snap.Sessions[i].ID] {
					if b.State == api.BlockRunning || b.FinishedAt != nil && snap.In(*b.FinishedAt) {
						snap.Sessions[i].Blocks = append(snap.Sessions[i].Blocks, b)
					}
				}
			}
		}()
	}
	wg.Wait()

	// The newest failures' output: head and tail lines.
	type fail struct {
		node, id string
		b        api.Block
	}
	var fails []fail
	for _, s := range snap.Sessions {
		for _, b := range s.Blocks {
			if b.State == api.BlockDone && b.ExitCode != nil && *b.ExitCode != 0 {
				fails = append(fails, fail{s.Node, s.ID, b})
			}
		}
	}
	slices.SortFunc(fails, func(a, b fail) int { return b.b.FinishedAt.Compare(*a.b.FinishedAt) })
	fails = fails[:min(len(fails), digestFailureTexts)]
	perText := max(256, min(2048, q.BudgetTokens*4/(3*max(1, len(fails)))))
	for _, f := range fails {
		wg.Add(1)
		go func() { // owned by this call: joined below
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			br, err := c.Block(ctx, f.node, f.id, f.b.N, api.BlockQuery{MaxBytes: perText})
			if err != nil {
				return // the failure gets its one line
			}
			mu.Lock()
			snap.Texts[digest.Pointer(f.node, f.id, f.b.N)] = br.Text
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(snap.Unavailable)
	return digest.Build(snap, q.BudgetTokens), nil
}
