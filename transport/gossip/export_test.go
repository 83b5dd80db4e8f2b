package gossip

// Crash stops g the way a killed process would: no leave message, memberlist just
// goes silent. Close afterwards is a no-op.
func Crash(g *Gossip) {
	g.closeOnce.Do(func() {
		g.life.Lock()
		g.closed = true
		g.life.Unlock()
		close(g.stop)
		g.loops.Wait()
		_ = g.ml.Shutdown()
		g.joins.Wait()
	})
}

// MissingSeeds exposes missingSeeds to the table test.
func MissingSeeds(members []Member, seeds []string) []string { return missingSeeds(members, seeds) }

// RejoinWarnings feeds the outcomes of join attempts to a rejoinWarner and returns
// its answers.
func RejoinWarnings(errs []error) []bool {
	var w rejoinWarner
	out := make([]bool, len(errs))
	for i, err := range errs {
		out[i] = w.warn(err)
	}
	return out
}
