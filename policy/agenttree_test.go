package policy

import (
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

func TestAgentLimits(t *testing.T) {
	var none *Policy
	if d, c := none.AgentLimits(); d != api.MaxSpawnDepth || c != api.MaxChildren {
		t.Fatalf("no policy: %d %d", d, c)
	}
	for doc, want := range map[string][2]int{
		"version: 1\n":                                        {api.MaxSpawnDepth, api.MaxChildren},
		"version: 1\nagents: {max_depth: 3}\n":                {3, api.MaxChildren},
		"version: 1\nagents: {max_depth: 1, max_children: 2}": {1, 2},
	} {
		pol, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if d, c := pol.AgentLimits(); d != want[0] || c != want[1] {
			t.Errorf("%q: %d %d, want %v", doc, d, c, want)
		}
	}
}
