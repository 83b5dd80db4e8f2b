package client_test

import (
	"github.com/fleetmux/fleetmux/client"
	"github.com/fleetmux/fleetmux/mcpserver"
)

// The client is the Fleet of `fleetmux mcp`: the MCP server drives a remote
// controller through it, with no adapter.
var _ mcpserver.Fleet = (*client.Client)(nil)
