package api

import "testing"

func TestSecretEnv(t *testing.T) {
	for key, want := range map[string]bool{
		EnvToken: true, EnvGossipKey: true, EnvNATSCreds: true, "FLEETMUX_NATS_TOKEN": true,
		"FLEETMUX_ANYTHING_NEW": true, "NATS_URL": true, "NATS_CREDS": true, "NATS_PASSWORD": true,
		EnvAddr: false, EnvSession: false, "PATH": false, "NATS": false, "NATS_SUBJECT_HINT": false,
		"FLEETMUX": false, "fleetmux_token": false,
	} {
		if got := SecretEnv(key); got != want {
			t.Errorf("SecretEnv(%q) = %v, want %v", key, got, want)
		}
	}
}
