package api

import (
	"fmt"
	"time"
)

// Node secrets (DESIGN "Guardrails", sudo without handing out the password): an
// admin stores a secret on one node; a policy `secrets` entry says who may have the
// node type it at a password prompt. The node keeps it in DIR/secrets/NAME (0600)
// and never sends it back: no verb, reply, stream, recording or audit record
// carries its value. Names are ValidName.

// MaxSecretBytes bounds a secret's value (256: a stored secret is also redacted from
// the output as a literal pattern, which must stay under policy's pattern limit
// once quoted).
const MaxSecretBytes = 256

// ValidSecret checks a secret's value: 1 to MaxSecretBytes bytes, none of them a
// control character (the node types it and then Enter: a line end or a control
// character inside would end the line early or edit it). The error never quotes
// the value.
func ValidSecret(value string) error {
	if value == "" || len(value) > MaxSecretBytes {
		return fmt.Errorf("a secret has 1 to %d bytes, this one has %d", MaxSecretBytes, len(value))
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("a secret has no control characters (a line end, a tab…): byte %d is one", i+1)
		}
	}
	return nil
}

type (
	// SecretBody is the body of PUT /v1/nodes/{node}/secrets/{name}.
	SecretBody struct {
		Value string `json:"value"`
	}
	// SecretSetRequest (verb secret_set) stores a secret on the node, replacing
	// one of the same name.
	SecretSetRequest struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	// SecretRequest names a secret (verb secret_rm).
	SecretRequest struct {
		Name string `json:"name"`
	}
	// SecretInfo is what anyone learns of a stored secret: never its value.
	SecretInfo struct {
		Node      string    `json:"node"`
		Name      string    `json:"name"`
		UpdatedAt time.Time `json:"updated_at"`
	}
	// SecretList is the reply of secret_ls (GET /v1/nodes/{node}/secrets).
	SecretList struct {
		Secrets []SecretInfo `json:"secrets"`
	}
)
