package controller

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetmux/fleetmux/api"
)

// createTimeout bounds session creation (a shell starts and reaches its prompt).
const createTimeout = 20 * time.Second

// sessionsOf lists the sessions of nodes in parallel. With strict, the one node's
// error is returned; otherwise nodes that fail are listed as unavailable.
func (c *Controller) sessionsOf(ctx context.Context, who principal, names []string, strict bool) (api.SessionList, error) {
	type res struct {
		list api.SessionList
		err  error
	}
	results := make([]res, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() { // owned by this call: joined below
			defer wg.Done()
			results[i].err = c.call(ctx, who, n, "list", struct{}{}, &results[i].list, min(c.cfg.RequestTimeout, 2*time.Second))
		}()
	}
	wg.Wait()
	out := api.SessionList{Sessions: []api.Session{}}
	for i, r := range results {
		if r.err != nil {
			if strict {
				return api.SessionList{}, r.err
			}
			if ctx.Err() != nil {
				return api.SessionList{}, ctx.Err()
			}
			out.Unavailable = append(out.Unavailable, names[i])
			continue
		}
		out.Sessions = append(out.Sessions, r.list.Sessions...)
	}
	slices.SortFunc(out.Sessions, func(a, b api.Session) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return idOrder(a.ID, b.ID)
	})
	return out, nil
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

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// create creates a session on body.Node, or on the node pick chooses.
func (c *Controller) create(ctx context.Context, who principal, body api.NewSession) (api.Session, error) {
	node := body.Node
	if node == "" {
		var ok bool
		if node, ok = c.nodes.pick(); !ok {
			return api.Session{}, api.Errorf(api.CodeUnavailable, "no alive node to create a session on")
		}
	}
	var s api.Session
	err := c.call(ctx, who, node, "create", body.CreateRequest, &s, createTimeout)
	return s, err
}

func checkCommand(cmd string) error {
	switch {
	case strings.TrimSpace(cmd) == "":
		return api.Errorf(api.CodeBadRequest, "empty command")
	case len(cmd) > api.MaxCommandBytes:
		return api.Errorf(api.CodeTooLarge, "command of %d bytes (limit %d)", len(cmd), api.MaxCommandBytes)
	}
	return nil
}
