package main

import (
	"strings"
	"testing"

	"github.com/fleetmux/fleetmux/api"
)

// TestTryEnvHasNoSecrets is issue 15 #4 as it was reported: `fleetmux try env`
// showed the token, the gossip key and the NATS credentials of the environment
// fleetmux ran in.
func TestTryEnvHasNoSecrets(t *testing.T) {
	needBash(t)
	secrets := map[string]string{
		api.EnvToken: "fm-secret-token", api.EnvGossipKey: "fm-secret-gossip", api.EnvNATSCreds: "/fm-secret/x.creds",
		"NATS_CREDS": "/fm-secret/y.creds", "NATS_TOKEN": "fm-secret-nats",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("FM_HARMLESS", "still-here")
	out, errs, err := runArgs(t, "try", "--cwd", t.TempDir(), "--", "env")
	if err != nil {
		t.Fatalf("try env: %v %s", err, errs)
	}
	if strings.Contains(out, "fm-secret") {
		t.Errorf("a secret is in the session's environment:\n%s", out)
	}
	if !strings.Contains(out, "FM_HARMLESS=still-here") {
		t.Errorf("the session lost an ordinary variable:\n%s", out)
	}
}
