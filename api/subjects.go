package api

import (
	"fmt"
	"strings"
)

// NATS subjects (DESIGN.md). Every subject starts with a configurable prefix
// (DefaultPrefix); node names and session ids are single subject tokens (ValidName).
//
//	<prefix>.out.<node>.<session>    raw output; headers HeaderOffset, HeaderTime
//	<prefix>.block.<node>.<session>  BlockEvent (JSON)
//	<prefix>.event.<node>.<session>  SessionEvent (JSON)
//	<prefix>.audit.<node>            AuditRecord (JSON)
//	<prefix>.approval.<node>         ApprovalEvent (JSON)
//	<prefix>.agent.<node>.<agent>    AgentEvent (JSON)
//	<prefix>.rpc.<node>.<verb>       the node API (request/reply, NATS micro service)
//	<prefix>.rpc.<node>.<verb>.cancel  ends a running long request (HeaderCancelID)
const (
	DefaultPrefix = "fleetmux"

	// HeaderOffset is the byte offset of a message's first byte in the session's output.
	HeaderOffset = "Fleetmux-Offset"
	// HeaderTime is when the output was read (RFC 3339, nanoseconds).
	HeaderTime = "Fleetmux-Time"
	// HeaderActor names who made a request (an API token name, an SSH key
	// fingerprint); it goes into the audit record.
	HeaderActor = "Fleetmux-Actor"
	// HeaderAuth carries a node request's signed envelope (trust.Signer): the
	// controller, the actor and the role that the node checks and audits.
	HeaderAuth = "Fleetmux-Auth"
	// HeaderCancelID names a long request (LongVerb) so that its caller can end it:
	// a message on the request's subject + ".cancel" with this id as its body
	// cancels the handler's context (the caller left; nobody awaits the reply).
	HeaderCancelID = "Fleetmux-Cancel-Id"

	// ServiceName is the NATS micro service name of the node API.
	ServiceName = "fleetmux-node"

	// StreamOut, StreamEvents and StreamAudit are the JetStream streams that keep
	// the subjects: output; block and session events (what a subscriber may read);
	// audit records (controllers only).
	StreamOut    = "FLEETMUX_OUT"
	StreamEvents = "FLEETMUX_EVENTS"
	StreamAudit  = "FLEETMUX_AUDIT"

	// BucketTokens, BucketPolicy and BucketApprovals are the JetStream key-value
	// buckets every controller and node share: API tokens (hashed), the current
	// policy, pending and decided approvals.
	BucketTokens    = "FLEETMUX_TOKENS"
	BucketPolicy    = "FLEETMUX_POLICY"
	BucketApprovals = "FLEETMUX_APPROVALS"

	// MaxChunk bounds the payload of one output message (well under NATS's 1 MB).
	MaxChunk = 64 << 10
)

// Kinds of subject.
const (
	KindOut   = "out"
	KindBlock = "block"
	KindEvent = "event"
	KindAudit = "audit"
	KindRPC   = "rpc"
	// KindApproval: <prefix>.approval.<node>, the node's approval events.
	KindApproval = "approval"
	// KindAgent: <prefix>.agent.<node>.<agent>, an agent's events (AgentEvent).
	KindAgent = "agent"
	// KindConsumer: <prefix>.consumer.<stream>.<name>[.<filter>], a request to a
	// controller for a pull consumer (Subjects.Consumer).
	KindConsumer = "consumer"
)

// Subjects builds subjects under one prefix.
type Subjects struct{ Prefix string }

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// Out is the output subject of a session.
func (s Subjects) Out(node, session string) string {
	return s.prefix() + "." + KindOut + "." + node + "." + session
}

// Block is the block event subject of a session.
func (s Subjects) Block(node, session string) string {
	return s.prefix() + "." + KindBlock + "." + node + "." + session
}

// Event is the session event subject of a session.
func (s Subjects) Event(node, session string) string {
	return s.prefix() + "." + KindEvent + "." + node + "." + session
}

// Agent is the event subject of an agent (its session's id).
func (s Subjects) Agent(node, agent string) string {
	return s.prefix() + "." + KindAgent + "." + node + "." + agent
}

// Audit is the audit subject of a node.
func (s Subjects) Audit(node string) string { return s.prefix() + "." + KindAudit + "." + node }

// Approval is the approval event subject of a node.
func (s Subjects) Approval(node string) string {
	return s.prefix() + "." + KindApproval + "." + node
}

// RPC is the request subject of a node API verb.
func (s Subjects) RPC(node, verb string) string {
	return s.prefix() + "." + KindRPC + "." + node + "." + verb
}

// Consumer is the subject on which a subscriber asks a controller for its pull
// consumer named name on stream, filtered to filter ("" for the whole stream):
// the same tokens as JetStream's $JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>,
// so the NATS server checks the filter against the asker's permissions, while the
// controller writes the consumer's configuration (no deliver subject).
func (s Subjects) Consumer(stream, name, filter string) string {
	subj := s.prefix() + "." + KindConsumer + "." + stream + "." + name
	if filter != "" {
		subj += "." + filter
	}
	return subj
}

// All is the wildcard of one kind for one node ("*" for every node), e.g.
// fleetmux.out.web-1.>.
func (s Subjects) All(kind, node string) string {
	if kind == KindAudit || kind == KindApproval {
		return s.prefix() + "." + kind + "." + node
	}
	return s.prefix() + "." + kind + "." + node + ".>"
}

// Subject is a parsed subject.
type Subject struct {
	Kind    string // KindOut, KindBlock, KindEvent, KindAgent, KindAudit, KindApproval or KindRPC
	Node    string
	Session string // out, block, event, agent
	Verb    string // rpc
}

// Parse splits a subject under this prefix. Names are validated.
func (s Subjects) Parse(subject string) (Subject, error) {
	rest, ok := strings.CutPrefix(subject, s.prefix()+".")
	if !ok {
		return Subject{}, fmt.Errorf("%w: subject %q is not under %q", ErrBadName, subject, s.prefix())
	}
	parts := strings.Split(rest, ".")
	var out Subject
	switch {
	case len(parts) == 3 && (parts[0] == KindOut || parts[0] == KindBlock || parts[0] == KindEvent || parts[0] == KindAgent):
		out = Subject{Kind: parts[0], Node: parts[1], Session: parts[2]}
	case len(parts) == 2 && (parts[0] == KindAudit || parts[0] == KindApproval):
		out = Subject{Kind: parts[0], Node: parts[1]}
	case len(parts) == 3 && parts[0] == KindRPC:
		out = Subject{Kind: parts[0], Node: parts[1], Verb: parts[2]}
	default:
		return Subject{}, fmt.Errorf("%w: subject %q is not a fleetmux subject", ErrBadName, subject)
	}
	if err := validName("node name", out.Node); err != nil {
		return Subject{}, err
	}
	if out.Session != "" {
		if err := validName("session id", out.Session); err != nil {
			return Subject{}, err
		}
	}
	if out.Verb != "" {
		if err := validName("verb", out.Verb); err != nil {
			return Subject{}, err
		}
	}
	return out, nil
}

// ValidPrefix checks a subject prefix: one or more tokens joined by dots.
func ValidPrefix(p string) error {
	for _, tok := range strings.Split(p, ".") {
		if err := validName("subject prefix token", tok); err != nil {
			return err
		}
	}
	return nil
}
