package node

import (
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

// Every verb of api.NodeVerbs has its handler, and the node has no verb the table
// lacks (it would be served with no role, audit or long-request rule).
func TestVerbsMatchTheTable(t *testing.T) {
	for _, v := range api.NodeVerbs {
		if verbs[v.Name] == nil {
			t.Errorf("api.NodeVerbs has %q, the node no handler for it", v.Name)
		}
	}
	for name := range verbs {
		if _, ok := api.NodeVerb(name); !ok {
			t.Errorf("the node handles %q, which api.NodeVerbs lacks", name)
		}
	}
}
