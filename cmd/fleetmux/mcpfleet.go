package main

import (
	"context"
	"errors"
	"syscall"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/controller"
)

// clientFleet is the controller.Fleet of `fleetmux mcp`: the HTTP API of a remote
// controller, through the client SDK. Its errors are *api.Error (client errors
// unwrap to one); a controller it cannot reach is an "unavailable" error that says
// so.
type clientFleet struct {
	cl *client.Client
}

var _ controller.Fleet = (*clientFleet)(nil)

// wrap makes transport errors (connection refused, a reset) API errors a model can
// act on; API errors and cancellations go through.
func (f *clientFleet) wrap(err error) error {
	var ae *api.Error
	switch {
	case err == nil, errors.As(err, &ae), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, syscall.ECONNREFUSED):
		return api.Errorf(api.CodeUnavailable, "no fleetmux controller at %s (connection refused): is it running? (`fleetmux dev`, or set --addr / %s)", f.cl.Addr(), envAddr)
	}
	return api.Errorf(api.CodeUnavailable, "the fleetmux controller at %s: %v", f.cl.Addr(), err)
}

func (f *clientFleet) ListNodes(ctx context.Context) ([]api.Node, error) {
	l, err := f.cl.Nodes(ctx)
	return l.Nodes, f.wrap(err)
}

func (f *clientFleet) ListSessions(ctx context.Context, node string, labels map[string]string) (api.SessionList, error) {
	l, err := f.cl.Sessions(ctx, client.SessionFilter{Node: node, Labels: labels})
	return l, f.wrap(err)
}

func (f *clientFleet) CreateSession(ctx context.Context, req api.NewSession) (api.Session, error) {
	s, err := f.cl.NewSession(ctx, req)
	return s, f.wrap(err)
}

func (f *clientFleet) GetSession(ctx context.Context, node, id string) (api.Session, error) {
	s, err := f.cl.Session(ctx, node, id)
	return s, f.wrap(err)
}

func (f *clientFleet) UpdateSession(ctx context.Context, node, id string, p api.SessionPatch) (api.Session, error) {
	s, err := f.cl.UpdateSession(ctx, node, id, p)
	return s, f.wrap(err)
}

func (f *clientFleet) CloseSession(ctx context.Context, node, id string) (api.Session, error) {
	s, err := f.cl.CloseSession(ctx, node, id)
	return s, f.wrap(err)
}

func (f *clientFleet) RunCommand(ctx context.Context, node, id string, body api.RunBody) (api.BlockResult, error) {
	br, err := f.cl.Run(ctx, node, id, body)
	return br, f.wrap(err)
}

func (f *clientFleet) Input(ctx context.Context, node, id, data string) error {
	return f.wrap(f.cl.Input(ctx, node, id, data))
}

func (f *clientFleet) Keys(ctx context.Context, node, id string, keys []string) error {
	return f.wrap(f.cl.Keys(ctx, node, id, keys...))
}

func (f *clientFleet) Resize(ctx context.Context, node, id string, cols, rows int) (api.Session, error) {
	s, err := f.cl.Resize(ctx, node, id, cols, rows)
	return s, f.wrap(err)
}

func (f *clientFleet) Screen(ctx context.Context, node, id string) (api.Screen, error) {
	sc, err := f.cl.Screen(ctx, node, id)
	return sc, f.wrap(err)
}

func (f *clientFleet) Blocks(ctx context.Context, node, id string) (api.BlockList, error) {
	bl, err := f.cl.Blocks(ctx, node, id)
	return bl, f.wrap(err)
}

func (f *clientFleet) Block(ctx context.Context, node, id string, req api.BlockRequest) (api.BlockResult, error) {
	br, err := f.cl.Block(ctx, node, id, req.N, client.BlockQuery{Offset: req.Offset, Limit: req.Limit, Grep: req.Grep, MaxBytes: req.MaxBytes})
	return br, f.wrap(err)
}

func (f *clientFleet) Wait(ctx context.Context, node, id, until string, after int64, timeoutMS int) (api.WaitResult, error) {
	wr, err := f.cl.Wait(ctx, node, id, client.WaitQuery{Until: until, TimeoutMS: timeoutMS, After: after})
	return wr, f.wrap(err)
}

func (f *clientFleet) Fanout(ctx context.Context, req api.FanoutRequest) (api.Fanout, error) {
	fo, err := f.cl.Fanout(ctx, req)
	return fo, f.wrap(err)
}
