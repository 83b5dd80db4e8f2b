package controller

import (
	"context"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/policy"
)

// The guardrail policy (DESIGN.md "Guardrails"): one document in a store that every
// controller and node shares (FLEETMUX_POLICY), which the nodes watch and enforce.
// The controller only checks a document before storing it (policy.Parse, so a
// typo is a 400 naming its line and field, never a node refusing it later) and
// serves it back: GET /v1/policy needs the operator role (operators work under
// those rules, and a denial names its rule anyway; the policy holds no secrets),
// PUT and DELETE need admin.

// PolicyStore is the shared store of the policy (cmd wires transport.Policy on the
// FLEETMUX_POLICY bucket). Implementations are safe for concurrent use.
type PolicyStore interface {
	// Get returns the stored document and its revision (nil, 0: none is set).
	Get(ctx context.Context) (doc []byte, revision uint64, err error)
	// Put stores doc and returns its revision, the policy's new version.
	Put(ctx context.Context, doc []byte) (revision uint64, err error)
	// Delete removes the policy.
	Delete(ctx context.Context) error
}

// errNoPolicyStore answers the policy routes of a controller without a store.
var errNoPolicyStore = api.Errorf(api.CodeUnavailable, "this controller has no policy store (FLEETMUX_POLICY)")

// Policy returns the policy in force ("Version 0": none is set).
func (c *Controller) Policy(ctx context.Context) (api.PolicyInfo, error) {
	if c.cfg.Policy == nil {
		return api.PolicyInfo{}, errNoPolicyStore
	}
	doc, rev, err := c.cfg.Policy.Get(ctx)
	if err != nil {
		return api.PolicyInfo{}, c.storeErr("policy store", err)
	}
	if doc == nil {
		return api.PolicyInfo{}, nil
	}
	out := api.PolicyInfo{Version: rev, Document: string(doc)}
	if p, err := policy.Parse(doc); err == nil {
		out.Rules, out.Redacts = len(p.Rules), len(p.Redacts)
	}
	return out, nil
}

// SetPolicy checks doc (policy.Parse) and stores it as the policy in force; every
// node applies it within a second. A document that does not parse is a bad
// request naming its line and field, and changes nothing.
func (c *Controller) SetPolicy(ctx context.Context, doc []byte) (api.PolicyInfo, error) {
	if c.cfg.Policy == nil {
		return api.PolicyInfo{}, errNoPolicyStore
	}
	if len(doc) > policy.MaxBytes {
		return api.PolicyInfo{}, api.Errorf(api.CodeTooLarge, "policy over %d bytes", policy.MaxBytes)
	}
	p, err := policy.Parse(doc)
	if err != nil {
		return api.PolicyInfo{}, api.Errorf(api.CodeBadRequest, "%v", err)
	}
	rev, err := c.cfg.Policy.Put(ctx, doc)
	if err != nil {
		return api.PolicyInfo{}, c.storeErr("policy store", err)
	}
	c.log.Info("policy set", "version", rev, "rules", len(p.Rules), "by", callerOf(ctx).principal)
	return api.PolicyInfo{Version: rev, Document: string(doc), Rules: len(p.Rules), Redacts: len(p.Redacts)}, nil
}

// DeletePolicy removes the policy: every node then allows everything. It returns
// the policy that was in force.
func (c *Controller) DeletePolicy(ctx context.Context) (api.PolicyInfo, error) {
	old, err := c.Policy(ctx)
	if err != nil {
		return api.PolicyInfo{}, err
	}
	if err := c.cfg.Policy.Delete(ctx); err != nil {
		return api.PolicyInfo{}, c.storeErr("policy store", err)
	}
	c.log.Warn("policy removed: every node allows every command", "was", old.Version, "by", callerOf(ctx).principal)
	return old, nil
}

// checkPolicy looks at the policy as the controller starts (binding the store,
// which creates the bucket the nodes watch, so they follow it from then on), and
// warns loudly when none is set and the API listens beyond loopback. A store it
// cannot read is logged, not fatal: the policy routes then fail on their own.
// It runs on a goroutine of its own (Start does not wait on a store that may be
// away); Shutdown waits for it.
func (c *Controller) checkPolicy() {
	if c.cfg.Policy == nil {
		return
	}
	c.bg.Add(1)
	go func() { // owned by the controller: Shutdown waits
		defer c.bg.Done()
		c.logPolicy()
	}()
}

func (c *Controller) logPolicy() {
	ctx, cancel := context.WithTimeout(c.ctx, 3*time.Second)
	defer cancel()
	doc, rev, err := c.cfg.Policy.Get(ctx)
	switch {
	case err != nil:
		if c.ctx.Err() == nil {
			c.log.Warn("policy store not readable", "err", err)
		}
	case doc != nil:
		c.log.Info("policy in force", "version", rev)
	case c.cfg.Exposed:
		c.log.Warn("NO POLICY SET: every node allows every command, and this controller listens beyond loopback; set one with: fleetmux policy set FILE")
	default:
		c.log.Info("no policy set: every command is allowed (fleetmux policy set FILE)")
	}
}
