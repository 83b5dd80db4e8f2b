package api

import "strings"

// Environment variables fleetmux reads or sets: one name each.
const (
	// EnvAddr is the controller's address for the client verbs (not a secret).
	EnvAddr = "FLEETMUX_ADDR"
	// EnvToken is an API token for the client verbs and the controller.
	EnvToken = "FLEETMUX_TOKEN"
	// EnvGossipKey is the gossip encryption key (hex) of the server commands.
	EnvGossipKey = "FLEETMUX_GOSSIP_KEY"
	// EnvNATSCreds names a NATS .creds file of the server commands.
	EnvNATSCreds = "FLEETMUX_NATS_CREDS"
	// EnvSession is set in every session to its id (not a secret).
	EnvSession = "FLEETMUX_SESSION"
)

// publicEnv are the FLEETMUX_ variables that are no secret: a session may
// inherit them. Every other FLEETMUX_ variable is taken for a secret.
var publicEnv = []string{EnvAddr, EnvSession}

// secretEnv are the variables outside FLEETMUX_ that hold credentials or name
// them: the NATS tools' (nats CLI, nats.go examples), which an agent's operator
// may have set for the agent itself.
var secretEnv = []string{
	"NATS_URL", "NATS_CREDS", "NATS_NKEY", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN",
	"NATS_CERT", "NATS_KEY", "NATS_CA", "NATS_CONTEXT", "NATS_JWT", "NATS_SEED",
}

// SecretEnv reports whether the environment variable key holds (or names) a
// fleetmux or NATS secret, so that no session inherits it from the process that
// starts it: every FLEETMUX_ variable but EnvAddr and EnvSession (so a secret
// added later is covered without a new entry here), and the NATS tools'
// credential variables. This is the one list; the session spawn path applies it.
func SecretEnv(key string) bool {
	if strings.HasPrefix(key, "FLEETMUX_") {
		for _, p := range publicEnv {
			if key == p {
				return false
			}
		}
		return true
	}
	for _, s := range secretEnv {
		if key == s {
			return true
		}
	}
	return false
}
