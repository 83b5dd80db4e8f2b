package node_test

import (
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
	"github.com/fleetmux/fleetmux/internal/testutil"
)

// agentSecrets are what an agent's operator sets for the agent itself: none of
// them may reach a session (issue 15 #4).
var agentSecrets = map[string]string{
	api.EnvToken:            "fm-token-secret-1",
	api.EnvGossipKey:        "fm-gossip-secret-2",
	api.EnvNATSCreds:        "/secret/path/node.creds",
	"FLEETMUX_API_TOKEN":    "fm-token-secret-3",
	"FLEETMUX_NATS_TOKEN":   "fm-nats-secret-4",
	"FLEETMUX_FUTURE_THING": "fm-future-secret-5",
	"NATS_CREDS":            "/secret/path/user.creds",
	"NATS_URL":              "nats://u:fm-nats-secret-6@127.0.0.1:4222",
	"NATS_PASSWORD":         "fm-nats-secret-7",
	"NATS_NKEY":             "/secret/path/user.nk",
}

// TestSessionsInheritNoSecrets starts an agent with fleetmux and NATS secrets in
// its environment and runs env (and a look at /proc/self/environ) in a session of
// each shell: no secret shows; other variables still pass.
func TestSessionsInheritNoSecrets(t *testing.T) {
	for k, v := range agentSecrets {
		t.Setenv(k, v)
	}
	t.Setenv(api.EnvAddr, "http://127.0.0.1:7070")
	t.Setenv("FM_HARMLESS", "still-here")
	f := newFixture(t)
	for _, shell := range []string{"bash", "zsh"} {
		t.Run(shell, func(t *testing.T) {
			testutil.NeedTool(t, shell)
			shellNoSecrets(t, f, shell)
		})
	}
}

func shellNoSecrets(t *testing.T, f *fixture, shell string) {
	{
		s := f.create(api.CreateRequest{Shell: shell, Env: map[string]string{"MINE": "given"}})
		out := f.run(s.ID, "env; tr '\\0' '\\n' </proc/$$/environ").Text
		for k, v := range agentSecrets {
			if strings.Contains(out, k+"=") || strings.Contains(out, v) {
				t.Errorf("%s session: %s (%s) is in its environment:\n%s", shell, k, v, out)
			}
		}
		for _, want := range []string{"FM_HARMLESS=still-here", "MINE=given", api.EnvAddr + "="} {
			if !strings.Contains(out, want) {
				t.Errorf("%s session: %s missing from its environment:\n%s", shell, want, out)
			}
		}
	}
}
