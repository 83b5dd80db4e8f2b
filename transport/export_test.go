package transport

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
