// Package api is what fleetmux's processes and clients agree on over the wire: the JSON
// wire types, the NATS subject builders and parsers, the protocol version and the
// validation of names (see DESIGN.md).
//
// So far it holds the protocol version and the names: node names, session ids and
// session addresses ("NODE/ID"). The wire types and subjects come with the node agent
// and the controller.
//
// api imports the standard library only, so that every part of fleetmux and every
// client can depend on it.
package api

// ProtocolVersion is the version of the wire protocol between nodes, controllers and
// clients. It changes only when a change breaks existing peers.
const ProtocolVersion = 1
