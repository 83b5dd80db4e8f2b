// Package api is what fleetmux's processes and clients agree on, with one definition
// of each thing (DESIGN.md):
//
//   - the JSON wire types of the node API and the HTTP API (types.go, http.go) and
//     the NATS subjects (subjects.go);
//   - names: node names, session ids, session addresses "NODE/ID" and labels
//     (names.go, labels.go), and the checks of free text (text.go);
//   - the protocol's words (vocab.go): session and block states, wait conditions,
//     event types, roles;
//   - limits that more than one package enforces (limits.go);
//   - error codes and their HTTP statuses (HTTPStatus, CodeForStatus);
//   - the loopback rule behind every "loopback only unless authenticated" check
//     (IsLoopbackHost);
//   - the protocol version.
//
// api imports the standard library only, so that every part of fleetmux and every
// client can depend on it.
package api

// ProtocolVersion is the version of the wire protocol between nodes, controllers and
// clients. It changes only when a change breaks existing peers.
const ProtocolVersion = 1
