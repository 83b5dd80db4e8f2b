package controller

import "time"

// SetFollowBuffer sets how many live messages a stream holds for a slow client
// (tests make it tiny to force the catch-up path) and returns the restore func.
func SetFollowBuffer(n int) (restore func()) {
	old := followBuffer
	followBuffer = n
	return func() { followBuffer = old }
}

// SetDownGrace sets how long c believes a node is still alive after gossip said it
// went down (fake-bus tests shorten the second it is).
func SetDownGrace(c *Controller, d time.Duration) {
	c.nodes.mu.Lock()
	defer c.nodes.mu.Unlock()
	c.nodes.grace = d
}

// Patterns are the route patterns the controller's mux serves.
func Patterns(c *Controller) []string { return c.patterns }

// MaxLongPerPrincipal is how many long requests one principal may hold on a node.
const MaxLongPerPrincipal = maxLongPerPrincipal
