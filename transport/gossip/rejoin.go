package gossip

import (
	"context"
	"time"
)

// RejoinInterval is how often KeepJoined looks for seeds that are not alive members
// when its caller passes no interval.
const RejoinInterval = 2 * time.Second

// rejoinTimeout bounds one join attempt of KeepJoined.
const rejoinTimeout = 3 * time.Second

// KeepJoined joins the seeds (host:port) that are not alive members, at once and then
// every interval (RejoinInterval when 0), until ctx is done; it blocks until then. A
// seed that is not up yet, or that restarts (a controller), is joined when it
// comes back. It warns once each time the seeds stop being reachable, not on every
// attempt. The caller owns the goroutine that runs it and stops it with ctx.
func (g *Gossip) KeepJoined(ctx context.Context, seeds []string, interval time.Duration) {
	if interval <= 0 {
		interval = RejoinInterval
	}
	var w rejoinWarner
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if missing := missingSeeds(g.Members(), seeds); len(missing) > 0 {
			jctx, cancel := context.WithTimeout(ctx, rejoinTimeout)
			_, err := g.Join(jctx, missing)
			cancel()
			if w.warn(err) && ctx.Err() == nil {
				g.log.Warn("gossip seeds not reachable yet; retrying", "node", g.name, "seeds", missing, "err", err)
			}
		}
		t.Reset(interval)
	}
}

// missingSeeds returns the seeds, in order, that are not the address of an alive
// member. A seed given by host name never matches (members are known by IP), so it
// is joined again on every round; joining an alive member is harmless.
func missingSeeds(members []Member, seeds []string) []string {
	alive := make(map[string]bool, len(members))
	for _, m := range members {
		if m.State == MemberAlive {
			alive[m.Addr] = true
		}
	}
	var missing []string
	for _, s := range seeds {
		if !alive[s] {
			missing = append(missing, s)
		}
	}
	return missing
}

// rejoinWarner decides which failed join attempts are worth a warning: the first
// failure after a success (or the start), not the ones that repeat it.
type rejoinWarner struct{ warned bool }

// warn takes the outcome of one join attempt (nil: some seed was reached) and
// reports whether to warn about it.
func (w *rejoinWarner) warn(err error) bool {
	if err == nil {
		w.warned = false
		return false
	}
	if w.warned {
		return false
	}
	w.warned = true
	return true
}
