package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/tracing"
	"github.com/fleetmux/fleetmux/trust"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// rawJSON is a node's reply kept as it came (a JSON object): decodeReply fills it.
type rawJSON = json.RawMessage

// errNodeDown is the cancel cause of a request whose node went dead or left.
var errNodeDown = errors.New("node went down")

// errRequestTimeout is the cause of a request that outlived its timeout.
var errRequestTimeout = errors.New("request timed out")

// principal is who a node request is made for: id, the authenticated identity
// ("token:NAME", "ssh:FINGERPRINT"), which the node audits and its policy matches
// and which per-caller limits count; actor, the label the client gave itself
// (audited beside it, never trusted); and the role the node checks the verb
// against. All three are signed into the request.
type principal struct{ actor, id, role string }

// call sends one verb to a node, signed for who (Config.Signer), and decodes its
// reply into out (nil: ignore it). It fails fast for unknown, dead and unserved
// nodes, and is cancelled when the node goes dead while it waits. Errors are
// *api.Error, or ctx's error when the caller gave up.
func (c *Controller) call(ctx context.Context, who principal, node, verb string, req, out any, timeout time.Duration) (err error) {
	if api.LongVerb(verb) {
		release, err := c.longs.acquire(ctx, who.id, node, timeout)
		if err != nil {
			return err
		}
		defer release()
	}
	start := time.Now()
	if tracing.On() {
		var span trace.Span
		ctx, span = tracing.Start(ctx, "fleetmux.node "+verb, trace.SpanKindClient,
			attribute.String("fleetmux.node", node), attribute.String("rpc.method", verb),
			attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", c.subj.RPC(node, verb)))
		defer span.End()
		defer func() { tracing.Fail(span, err) }()
	}
	err = c.doCall(ctx, who, node, verb, req, out, timeout)
	c.metrics.nodeRequest(verb, err, time.Since(start))
	return err
}

func (c *Controller) doCall(ctx context.Context, who principal, node, verb string, req, out any, timeout time.Duration) error {
	if err := api.ValidName(node); err != nil {
		return api.Errorf(api.CodeBadRequest, "%v", err)
	}
	status, down, known := c.nodes.lookup(node)
	if !known {
		return c.unknownNode(node)
	}
	if !usable(status) {
		return api.Errorf(api.CodeUnavailable, "node %s is %s", node, status)
	}
	return c.send(ctx, who, node, verb, req, out, timeout, down)
}

// send signs and sends one verb to a node and decodes its reply, whether or not
// the node table holds the node (the learner asks nodes it does not hold yet);
// the request is cancelled when down is.
func (c *Controller) send(ctx context.Context, who principal, node, verb string, req, out any, timeout time.Duration, down context.Context) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("controller: encode %s request: %w", verb, err)
	}
	subject := c.subj.RPC(node, verb)
	auth, err := c.cfg.Signer.Sign(subject, data, trust.Claims{Actor: who.actor, Principal: who.id, Role: who.role})
	if err != nil {
		c.log.Error("node request not signed", "node", node, "verb", verb, "err", err)
		return api.Errorf(api.CodeInternal, "the controller could not sign the %s request (details in its log)", verb)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tctx, tcancel := context.WithTimeoutCause(cctx, timeout, errRequestTimeout)
	defer tcancel()
	defer context.AfterFunc(down, func() { cancel(errNodeDown) })()
	header := map[string]string{api.HeaderAuth: auth}
	tracing.Inject(ctx, header) // the node's span continues this trace (nothing while tracing is off)
	reply, err := c.cfg.Bus.Request(tctx, subject, header, data)
	if err != nil {
		var aerr *api.Error
		switch {
		case errors.As(err, &aerr): // the node's own error reply (NATS micro's error headers)
			c.nodes.ok(node)
			if aerr.Code == "" {
				aerr.Code = api.CodeInternal
			}
			return aerr
		case errors.Is(err, api.ErrNoResponders):
			c.nodes.suspect(node)
			return api.Errorf(api.CodeUnavailable, "node %s does not answer: no agent serves it on the bus", node)
		case context.Cause(cctx) == errNodeDown:
			return api.Errorf(api.CodeUnavailable, "node %s went down during the request", node)
		case ctx.Err() != nil:
			return ctx.Err()
		case context.Cause(tctx) == errRequestTimeout:
			c.nodes.suspect(node)
			return api.Errorf(api.CodeTimeout, "node %s did not answer %s within %v", node, verb, timeout)
		}
		c.log.Warn("node request failed", "node", node, "verb", verb, "err", err)
		return api.Errorf(api.CodeUnavailable, "node %s: the bus failed the request", node)
	}
	c.nodes.ok(node)
	if err := decodeReply(node, verb, reply, out); err != nil {
		return err
	}
	return c.checkReply(node, verb, out)
}

// decodeReply decodes a node's value reply into out (nil: ignore it); error
// replies never get here (they come from the bus as *api.Error). The value is
// decoded once: replies can be large (a run's text). A *rawJSON out takes the
// value as it came: the node encoded it, so only its shape (an object) is
// checked, not every byte of it.
func decodeReply(node, verb string, reply []byte, out any) error {
	if out == nil {
		return nil
	}
	if raw, ok := out.(*rawJSON); ok {
		v := bytes.TrimSpace(reply)
		if len(v) < 2 || v[0] != '{' || v[len(v)-1] != '}' {
			return api.Errorf(api.CodeInternal, "node %s sent a malformed %s reply", node, verb)
		}
		*raw = v
		return nil
	}
	if err := json.Unmarshal(reply, out); err != nil {
		return api.Errorf(api.CodeInternal, "node %s sent a malformed %s reply", node, verb)
	}
	return nil
}

// waitBudget is the request timeout of a verb that waits up to ms milliseconds on
// the node (run, wait): the node's own bound plus a margin for the trip.
func (c *Controller) waitBudget(ms int, dflt time.Duration) time.Duration {
	d := dflt
	if ms > 0 {
		d = time.Duration(ms) * time.Millisecond
	}
	return min(d, api.MaxWait) + c.cfg.RequestTimeout
}

// timeoutFor is a request timeout for a verb that waits ms on the node.
func (c *Controller) timeoutFor(ms int) time.Duration { return c.waitBudget(ms, api.DefaultWait) }

// defaultLearnWindow is Config.LearnWindow's default.
const defaultLearnWindow = 10 * time.Second

// unknownNode is the error for a request to a node the node table does not hold:
// unavailable while the controller is still learning the fleet (it knows no node
// yet, within Config.LearnWindow of New), not found otherwise.
func (c *Controller) unknownNode(node string) error {
	if c.cfg.LearnWindow > 0 && time.Since(c.born) < c.cfg.LearnWindow && c.nodes.size() == 0 {
		return api.Errorf(api.CodeUnavailable, "node %q is not known yet: this controller started %s ago and is still learning the nodes; try again", node, time.Since(c.born).Round(time.Millisecond))
	}
	return api.Errorf(api.CodeNotFound, "unknown node %q (GET /v1/nodes lists the nodes)", node)
}
