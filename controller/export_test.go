package controller

import "github.com/fleetmux/fleetmux/mcpserver"

// MCPFleet is c as the Fleet of its MCP server (what /mcp serves).
func MCPFleet(c *Controller) mcpserver.Fleet { return mcpFleet{c} }

// SetFollowBuffer sets how many live messages a stream holds for a slow client
// (tests make it tiny to force the catch-up path) and returns the restore func.
func SetFollowBuffer(n int) (restore func()) {
	old := followBuffer
	followBuffer = n
	return func() { followBuffer = old }
}
