// Package trust holds fleetmux's identities (DESIGN.md, "Trust model"): roles and
// what each may do, ed25519 key files, controller certificates issued by a fleet
// root key, and the signed request envelope that every node API request carries in
// its Fleetmux-Auth header.
//
// The fleet root key (fleet.key, made by `fleetmux controller init` or `fleetmux
// dev`) signs one certificate per enrolled controller (IssueCert). A controller
// signs every node request with its own key (Signer); a node trusts the root's
// public key (fleet.pub) and checks each request (Verifier): the certificate, the
// envelope's signature over the subject, the body's hash, the actor, the role, the
// times and a request id that it has not seen before.
package trust
